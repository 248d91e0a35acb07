"""Transactions with the Java kafka-clients, 3.9 and the newest 4.x (compat-tests/java/TransactionHarness.java):
a transactional producer's commits and aborts as a read_committed Java consumer reads them, and fencing.

Kafka 4 clients use transactions v2 (KIP-890 part 2) with a broker whose ApiVersions finalizes the
transaction.version feature at 2, as a single kbroker node and Kafka 4 do; kafka-clients 3.9 speaks v1. Without a
JDK or the jars these tests skip locally and fail under CI (CI set in the env), as every Java harness test.
"""

from __future__ import annotations

import pytest

from java_harness import TRANSACTION_HARNESS, JavaHarness, compile_harness, generations

pytestmark = pytest.mark.client("java")


@pytest.fixture(scope="module")
def generation(java: JavaHarness) -> str:
    return java.kafka_version.split(".")[0]


@generations(scope="module")
def java(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> JavaHarness:
    return compile_harness(tmp_path_factory.mktemp(f"java-txn-{request.param}"), request.param,
                           extra=(TRANSACTION_HARNESS,))


def _run(java: JavaHarness, *args: object) -> list[dict]:
    return java.run(*args, main="TransactionHarness", timeout=120)


@pytest.mark.scenario("Transactions: commit and abort, read_committed")
def test_a_read_committed_java_consumer_reads_each_committed_record_once_and_no_aborted_one(
        java, bootstrap, new_topic):
    done = _run(java, "txn-produce", bootstrap, new_topic, 0, f"java-txn-{new_topic}",
                "commit:3", "abort:2", "commit:2", "abort:1")
    assert [line["result"] for line in done] == ["commit", "abort", "commit", "abort"]
    (read,) = _run(java, "read-committed", bootstrap, new_topic, 0)
    assert read["values"] == ["0-0", "0-1", "0-2", "2-0", "2-1"]
    assert read["position"] == read["end_offset"]


@pytest.mark.scenario("Transactions: fencing")
def test_a_java_producer_is_fenced_by_a_newer_one_with_its_transactional_id(java, bootstrap, new_topic):
    (fenced,) = _run(java, "fence", bootstrap, new_topic, 0, f"java-fence-{new_topic}")
    assert fenced["exception"] in ("org.apache.kafka.common.errors.ProducerFencedException",
                                   "org.apache.kafka.common.errors.InvalidProducerEpochException")
    (read,) = _run(java, "read-committed", bootstrap, new_topic, 0)
    assert read["values"] == ["successor"]


@pytest.mark.scenario("Transactions: v2 for Kafka 4 clients (epoch bump per transaction)")
def test_a_kafka_4_producer_bumps_its_epoch_with_every_transaction_and_a_3_9_producer_keeps_it(
        java, generation, bootstrap, new_topic):
    """Transactions v2 ends every transaction under the next epoch; v1 keeps the epoch InitProducerId gave."""
    transactional_id = f"java-epochs-{new_topic}"
    _run(java, "txn-produce", bootstrap, new_topic, 0, transactional_id, "commit:2", "abort:1", "commit:1")
    (described,) = _run(java, "describe", bootstrap, transactional_id)
    assert described["state"] in ("CompleteCommit", "COMPLETE_COMMIT")
    v2 = generation == "4" and _finalized_transaction_version(bootstrap) >= 2  # Kafka 3.9 brokers serve v1 only
    assert described["producer_epoch"] == (3 if v2 else 0)  # three ends under v2: epoch 0 -> 3
    (read,) = _run(java, "read-committed", bootstrap, new_topic, 0)
    assert read["values"] == ["0-0", "0-1", "2-0"]


def _finalized_transaction_version(bootstrap: str) -> int:
    """The broker's finalized `transaction.version` feature level (ApiVersions v3), 0 when it lists none."""
    from wire import messages

    from differential import Connection

    connection = Connection(bootstrap)
    try:
        answer = connection.call(18, 3, messages.ApiVersionsRequest(client_software_name="compat-tests",
                                                                     client_software_version="1"))
    finally:
        connection.close()
    return max((f.max_version_level for f in answer.finalized_features if f.name == "transaction.version"),
               default=0)
