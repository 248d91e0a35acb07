"""Hosts on one machine for network-partition tests: Linux network namespaces joined by a bridge (iproute2 only).

    with Network(brokers=(1, 2, 3)) as net:   # namespaces kb<tag>-1..3, each host 10.77.<n>.1<id>
        net.address(1)                         # "10.77.<n>.11"; this process is net.gateway, net.zookeeper too
        net.run(1, [...])                      # argv that runs a command inside host 1
        net.isolate(1) / net.cut(1, [ip, ...]) / net.heal(1)

The bridge lives in a namespace of its own; this process's namespace joins it through one veth pair (so the test's
clients and ZooKeeper reach every host at net.gateway), and each host through another. `isolate` takes a host's
link down (it reaches nobody, nobody reaches it); `cut` adds blackhole routes on the host for the given addresses
(its packets to them are dropped: a partition between it and them, the rest of its network intact); `heal` undoes
both. Everything is removed on exit. Needs root (CAP_NET_ADMIN): `available()` says why not.
"""

from __future__ import annotations

import random
import subprocess
import uuid
from collections.abc import Iterable


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _free_subnet() -> int:
    """n for a 10.77.n.0/24 no route of this namespace uses yet (another run's network, say)."""
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True, check=False).stdout
    free = [n for n in range(1, 250) if f"10.77.{n}." not in routes]
    if not free:
        raise OSError("every 10.77.n.0/24 is in use")
    return random.choice(free)


def available() -> str | None:
    """None when this machine lets us make namespaces, else why not."""
    name = f"kbprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except (OSError, FileNotFoundError) as error:
        return f"cannot create a network namespace (ip netns add): {error}"
    _ip("netns", "del", name)
    return None


class Network:
    def __init__(self, brokers: Iterable[int]) -> None:
        self.brokers = tuple(brokers)
        self.tag = uuid.uuid4().hex[:4]
        self.subnet = _free_subnet()
        self.gateway = f"10.77.{self.subnet}.1"  # this process, as the hosts see it (the clients' address)
        self.zookeeper = f"10.77.{self.subnet}.2"  # also this namespace, for ZooKeeper: cut apart from the clients
        self.hub = f"kb{self.tag}-hub"
        self._cuts: dict[int, list[str]] = {b: [] for b in self.brokers}
        self._made: list[str] = []  # namespaces, removed on exit (their interfaces go with them)
        self._links: list[str] = []  # veths made in this process's namespace, removed on exit
        self._root_link = f"kb{self.tag}r"

    def namespace(self, broker: int) -> str:
        return f"kb{self.tag}-{broker}"

    def address(self, broker: int) -> str:
        return f"10.77.{self.subnet}.{10 + broker}"

    def _link(self, broker: int) -> str:
        return f"kb{self.tag}h{broker}"

    def __enter__(self) -> Network:
        try:
            self._add_namespace(self.hub)
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.hub, "link", "set", "br0", "up")
            self._join(self._root_link, None, self.gateway)
            _ip("addr", "add", f"{self.zookeeper}/24", "dev", self._root_link)
            for broker in self.brokers:
                self._add_namespace(self.namespace(broker))
                _ip("-n", self.namespace(broker), "link", "set", "lo", "up")
                self._join(self._link(broker), self.namespace(broker), self.address(broker))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)

    def _join(self, link: str, namespace: str | None, address: str) -> None:
        """A veth pair from `namespace` (None: this process's) to the bridge, `address` on our end."""
        peer = f"{link}b"
        _ip("link", "add", link, "type", "veth", "peer", "name", peer)
        self._links.append(link)
        _ip("link", "set", peer, "netns", self.hub)
        _ip("-n", self.hub, "link", "set", peer, "master", "br0")
        _ip("-n", self.hub, "link", "set", peer, "up")
        where = [] if namespace is None else ["-n", namespace]
        if namespace is not None:
            _ip("link", "set", link, "netns", namespace)
            self._links.remove(link)  # goes with its namespace now
        _ip(*where, "addr", "add", f"{address}/24", "dev", link)
        _ip(*where, "link", "set", link, "up")

    def __exit__(self, *exc: object) -> None:
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
        self._links.clear()
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        self._made.clear()

    def run(self, broker: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(broker), *argv]

    def isolate(self, broker: int) -> None:
        _ip("-n", self.namespace(broker), "link", "set", self._link(broker), "down")

    def cut(self, broker: int, addresses: Iterable[str]) -> None:
        for address in addresses:
            _ip("-n", self.namespace(broker), "route", "add", "blackhole", f"{address}/32")
            self._cuts[broker].append(address)

    def heal(self, broker: int) -> None:
        _ip("-n", self.namespace(broker), "link", "set", self._link(broker), "up")
        for address in self._cuts[broker]:
            _ip("-n", self.namespace(broker), "route", "del", "blackhole", f"{address}/32")
        self._cuts[broker].clear()
