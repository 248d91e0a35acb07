"""Subscription regexes of KIP-848 members, as Kafka's coordinator reads and resolves them.

Kafka compiles a member's SubscribedTopicRegex with RE2/J and matches it against whole topic
names; RE2 here (google-re2) speaks the same dialect, so a regex Kafka refuses (lookarounds,
backreferences, possessive repeats) is refused here too, and one it accepts (`\\pL`, `\\z`,
`[[:alpha:]]`, `\\Q...\\E`) matches the same topics.

Kafka resolves a group's regexes apart from its heartbeats and keeps the result with the group,
resolving again when topics appear. `resolve` does the same work incrementally: against the
previous resolution only the topics created since are matched and the deleted ones dropped,
so a heartbeat with an unchanged topic list matches nothing at all.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Set

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused regex is the member's error, not the broker's log

Resolved = dict[str, frozenset[str]]


class InvalidRegex(ValueError):
    """Not a regex in Kafka's dialect; the message is RE2's description."""


@functools.lru_cache(maxsize=1024)
def compile_regex(regex: str):
    """The compiled regex (shared: members of a group mostly send the same one)."""
    try:
        return re2.compile(regex, _OPTIONS)
    except re2.error as error:
        description = error.args[0] if error.args else error
        if isinstance(description, bytes):
            description = description.decode(errors="replace")
        raise InvalidRegex(str(description)) from None


def matching(regex: str, names: Iterable[str]) -> frozenset[str]:
    """The names the regex matches whole; none for an invalid regex (Kafka ignores one it cannot parse)."""
    try:
        pattern = compile_regex(regex)
    except InvalidRegex:
        return frozenset()
    return frozenset(name for name in names if pattern.fullmatch(name))


def resolve(previous: Mapping[str, frozenset[str]], resolved_against: frozenset[str], regexes: Iterable[str],
            names: Set[str]) -> tuple[Resolved, frozenset[str]]:
    """The topics each of `regexes` matches among `names`, and the names that is true of.

    `previous` is an earlier result, obtained against `resolved_against`: a regex found there is
    brought up to date with the topics created and deleted since; a new one is matched in full.
    Regexes no longer asked for are dropped."""
    if names == resolved_against:
        created: Set[str] = frozenset()
        deleted: Set[str] = frozenset()
        snapshot = resolved_against
    else:
        snapshot = frozenset(names)
        created, deleted = snapshot - resolved_against, resolved_against - snapshot
    resolved: Resolved = {}
    for regex in regexes:
        known = previous.get(regex)
        if known is None:
            resolved[regex] = matching(regex, snapshot)
        elif created or deleted:
            resolved[regex] = (known - deleted) | matching(regex, created)
        else:
            resolved[regex] = known
    return resolved, snapshot
