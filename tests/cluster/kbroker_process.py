"""The cluster tests' brokers: `kbroker serve` in cluster mode (KbrokerProcess) or Apache Kafka 3.9 in ZooKeeper
mode (KafkaZkBroker), both from compat-tests/cluster_processes.py, which the cluster bench suite uses too.
`running_cluster` starts several on one chroot; KbrokerCluster tells what their Metadata answers say."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cluster_processes import KINDS, KafkaZkBroker, KbrokerProcess, names_everyone, start_all, wait_formed
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

__all__ = ["KINDS", "KafkaZkBroker", "KbrokerCluster", "KbrokerProcess", "running_cluster"]


class KbrokerCluster:
    """Brokers of one ZooKeeper chroot (kbroker's, or Kafka's behind the same interface), and what their Metadata
    answers say about partitions."""

    def __init__(self, brokers: dict[int, KbrokerProcess | KafkaZkBroker]) -> None:
        self.brokers = brokers

    def live(self) -> list[KbrokerProcess | KafkaZkBroker]:
        return [b for b in self.brokers.values() if b.process is not None]

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.live())

    def knows_everyone(self, via: KbrokerProcess | KafkaZkBroker) -> bool:
        return names_everyone(via.bootstrap, self.brokers)

    def partition(self, via: KbrokerProcess | KafkaZkBroker, index: int,
                  name: str) -> tuple[int, tuple[int, ...]] | None:
        """(leader, sorted ISR) of topic `name`, partition `index`, as the broker `via` tells it in Metadata."""
        topic = AdminClient({"bootstrap.servers": via.bootstrap, "log_level": 0}).list_topics(name, timeout=5) \
            .topics.get(name)
        if topic is None or index not in topic.partitions:
            return None
        found = topic.partitions[index]
        return found.leader, tuple(sorted(found.isrs))

    def agreed(self, index: int, name: str) -> tuple[int, tuple[int, ...]] | None:
        """The partition's (leader, ISR) once every live broker tells the same, with a leader."""
        seen = {self.partition(b, index, name) for b in self.live()}
        if len(seen) != 1:
            return None
        (found,) = seen
        return found if found is not None and found[0] >= 0 else None

    def in_sync(self, index: int, name: str, replicas: tuple[int, ...]) -> bool:
        return (self.agreed(index, name) or (None, ()))[1] == replicas

    def coordinator(self, key: str, key_type: int = 0) -> int:
        """The broker FindCoordinator (v3, asked of a live broker) names for a group (a transactional id with
        `key_type` 1); -1 while none is available."""
        from kafka_wire_peer import WireClient

        from wire import messages

        host, port = self.live()[0].bootstrap.rsplit(":", 1)
        client = WireClient(host, int(port))
        try:
            answer = client.call(10, 3, messages.FindCoordinatorRequest(key=key, key_type=key_type)).body
        finally:
            client.close()
        return answer.node_id if answer.error_code == 0 else -1


@contextlib.contextmanager
def running_cluster(zookeeper: str, workdir: Path, broker_ids: tuple[int, ...],
                    overrides: dict[str, str] | Callable[[int], dict[str, str]], kind: str = "kbroker",
                    **options: Callable[[int], Any]) -> Iterator[KbrokerCluster]:
    """Brokers `broker_ids` of `kind` (KINDS) on the `zookeeper` chroot, yielded once each is registered and every
    one's Metadata names the controller and all of them; killed (their log tails printed) afterwards. `overrides`
    are every broker's, or a function of the broker id (a port of its own); `options` are more constructor
    arguments, as functions of the broker id (e.g. host=..., wrap=...)."""
    overrides_of = overrides if callable(overrides) else lambda _: overrides
    brokers = {i: KINDS[kind](workdir / f"broker-{i}", zookeeper, i, overrides_of(i),
                              **{name: option(i) for name, option in options.items()}) for i in broker_ids}
    zk = KazooClient(hosts=zookeeper)
    try:
        start_all(brokers.values())
        zk.start(timeout=30)
        wait_formed(zk, brokers.values())
        yield KbrokerCluster(brokers)
    finally:
        for broker in brokers.values():
            print(f"broker {broker.broker_id} log:\n{broker.log_tail(60)}")
            broker.stop(signal.SIGKILL)
        zk.stop()
        zk.close()
