"""Subscription regexes in Kafka's dialect (RE2, as Kafka's RE2/J) and their incremental resolution."""

from __future__ import annotations

import pytest

from kbroker.coordinator import topic_regex
from kbroker.coordinator.topic_regex import InvalidRegex, compile_regex, matching, resolve

TOPICS = frozenset({"orders", "orders-eu", "payments", "Zahlungen"})


@pytest.mark.parametrize("regex", ["(?=orders).*", "(orders)\\1", "orders.*+", "(?>orders)", "x{1001}"])
def test_regex_kafka_cannot_compile_is_invalid(regex: str) -> None:
    with pytest.raises(InvalidRegex):
        compile_regex(regex)


@pytest.mark.parametrize(("regex", "expected"), [
    ("[[:lower:]]+", {"orders", "payments"}),
    ("\\p{Lu}\\pL+", {"Zahlungen"}),
    ("orders\\z", {"orders"}),
    ("\\Qorders-\\E.*", {"orders-eu"}),
    ("(?i)ZAHLUNGEN", {"Zahlungen"}),
])
def test_re2_syntax_matches_as_in_kafka(regex: str, expected: set[str]) -> None:
    assert matching(regex, TOPICS) == expected


def test_regex_matches_whole_names_only() -> None:
    assert matching("order", TOPICS) == set()


def test_invalid_regex_matches_nothing() -> None:
    assert matching("(?=orders).*", TOPICS) == set()


def test_resolution_follows_created_and_deleted_topics() -> None:
    first, against = resolve({}, frozenset(), ["orders.*"], TOPICS)
    later = (TOPICS - {"orders-eu"}) | {"orders-us"}
    second, _ = resolve(first, against, ["orders.*"], later)
    assert first == {"orders.*": {"orders", "orders-eu"}}
    assert second == {"orders.*": {"orders", "orders-us"}}


def test_resolution_matches_only_topics_created_since(monkeypatch: pytest.MonkeyPatch) -> None:
    first, against = resolve({}, frozenset(), ["orders.*"], TOPICS)
    looked_at: list[str] = []
    real = topic_regex.matching
    monkeypatch.setattr(topic_regex, "matching", lambda regex, names: real(regex, looked_at.extend(names) or names))
    resolve(first, against, ["orders.*"], TOPICS | {"orders-us"})
    assert looked_at == ["orders-us"]


def test_unchanged_topics_match_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    first, against = resolve({}, frozenset(), ["orders.*"], TOPICS)
    monkeypatch.setattr(topic_regex, "matching", lambda regex, names: pytest.fail("matched again"))
    assert resolve(first, against, ["orders.*"], set(TOPICS)) == (first, against)


def test_regexes_no_longer_asked_for_are_dropped() -> None:
    first, against = resolve({}, frozenset(), ["orders.*", "pay.*"], TOPICS)
    assert set(resolve(first, against, ["pay.*"], TOPICS)[0]) == {"pay.*"}
