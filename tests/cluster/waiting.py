"""Waiting in the cluster tests, where brokers settle asynchronously: compat-tests/cluster_processes.py's
wait_until (the cluster bench suite waits with it too) and ZooKeeper's first session."""

from __future__ import annotations

from cluster_processes import TIMEOUT, wait_until

import kafka_process

__all__ = ["TIMEOUT", "wait_for_zookeeper", "wait_until"]


def wait_for_zookeeper(connect: str, timeout: float = 90) -> None:
    """ZooKeeperProcess.start already waits for this; for a ZooKeeper started some other way."""
    kafka_process.wait_for_sessions(connect, timeout)
