"""Connection limits, as Kafka's ConnectionQuotas: `max.connections` for the broker, the same under a
`listener.name.<listener>.` prefix for one listener, and `max.connections.per.ip` (with
`max.connections.per.ip.overrides`). All are dynamic broker configs, read from the config in effect.

A connection past `max.connections` is not refused: as Kafka's acceptor blocks until a slot frees, it
waits unread (its requests unanswered) until another connection closes or the limit rises. Lowering
`max.connections` below the connections open closes the least recently active ones, as Kafka's
processors do. A connection past its address's limit is closed at once, as Kafka's
TooManyConnectionsException closes it.
"""

from __future__ import annotations

import collections
import socket
from collections.abc import Callable
from typing import Protocol

from kbroker.config import BrokerConfig
from kbroker.dynamic_config import current_value, per_ip_overrides


class Limited(Protocol):
    """What a connection shows the quotas: where it comes from, when it was last active, how to let it in
    or close it."""

    listener: str
    address: str
    last_active: float

    def admit(self) -> None: ...

    def refuse(self, reason: str) -> None: ...

    def drop(self, reason: str) -> None: ...


class ConnectionQuotas:
    def __init__(self, config: Callable[[], BrokerConfig]) -> None:
        self._config = config
        self._served: set[Limited] = set()
        self._by_listener: collections.Counter[str] = collections.Counter()
        self._by_address: collections.Counter[str] = collections.Counter()
        self._waiting: collections.deque[Limited] = collections.deque()
        self._overrides: tuple[str | None, dict[str, int]] = (None, {})

    def arrive(self, connection: Limited) -> bool:
        """A new connection: True if it may be served now, False if it waits for `admit`. Raises
        TooManyConnections when its address is over its limit."""
        if not self._slot_free(connection.listener):
            self._waiting.append(connection)
            return False
        self._count(connection)
        return True

    def leave(self, connection: Limited) -> None:
        """A connection closed: a slot it held goes to the connections waiting, in arrival order."""
        if connection in self._waiting:
            self._waiting.remove(connection)
        if connection not in self._served:
            return
        self._served.discard(connection)
        self._by_listener[connection.listener] -= 1
        self._by_address[connection.address] -= 1
        self.admit_waiting()

    def reconfigured(self) -> None:
        """The limits changed: as Kafka, close the least recently active connections over max.connections,
        then let in who waits if a limit rose."""
        excess = len(self._served) - int(self._config()["max.connections"])  # type: ignore[arg-type]
        if excess > 0:
            for connection in sorted(self._served, key=lambda served: served.last_active)[:excess]:
                connection.drop(f"over max.connections={self._config()['max.connections']}")
        self.admit_waiting()

    def admit_waiting(self) -> None:
        """Let in who waits, in arrival order, while slots are free (after a close, or when a limit rose)."""
        for connection in list(self._waiting):
            if not self._slot_free(connection.listener):
                continue
            self._waiting.remove(connection)
            try:
                self._count(connection)
            except TooManyConnections as error:
                connection.refuse(str(error))
                continue
            connection.admit()

    def _slot_free(self, listener: str) -> bool:
        config = self._config()
        listener_limit = current_value(config, f"listener.name.{listener.lower()}.max.connections")
        if listener_limit is not None and self._by_listener[listener] >= int(listener_limit):
            return False
        return len(self._served) < int(config["max.connections"])  # type: ignore[arg-type]

    def _count(self, connection: Limited) -> None:
        limit = self._address_limit(connection.address)
        if self._by_address[connection.address] >= limit:
            raise TooManyConnections(f"Too many connections from {connection.address} (maximum = {limit})")
        self._served.add(connection)
        self._by_listener[connection.listener] += 1
        self._by_address[connection.address] += 1

    def _address_limit(self, address: str) -> int:
        config = self._config()
        text = current_value(config, "max.connections.per.ip.overrides") or ""
        if text != self._overrides[0]:
            self._overrides = (text, _resolved(per_ip_overrides(text)))
        return self._overrides[1].get(address, int(config["max.connections.per.ip"]))  # type: ignore[arg-type]


class TooManyConnections(Exception):
    """The connection's address has its maximum of connections already."""


def _resolved(overrides: dict[str, int]) -> dict[str, int]:
    """Host names resolved to addresses once, when the overrides change (Kafka's InetAddress.getByName)."""
    found = {}
    for host, limit in overrides.items():
        try:
            found[socket.gethostbyname(host)] = limit
        except OSError:
            found[host] = limit
    return found
