"""OffsetCommit's per-partition errors: metadata over offset.metadata.max.bytes, and a commit
that cannot be written to __consumer_offsets."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.apis import offsets as api
from kbroker.broker import Broker
from kbroker.coordinator.offsets import OFFSETS_TOPIC
from wire import messages
from wire.errors import ErrorCode

OC = messages.OffsetCommitRequest
VERSION = 8


def _commit(broker: Broker, partitions: list[tuple[int, int, str | None]], group: str = "g") -> list[tuple[int, int]]:
    """(partition, error code) for each (partition, offset, metadata) committed in one request."""
    request = OC(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[OC.OffsetCommitRequestTopic(
        name="t", partitions=[OC.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                              committed_metadata=m) for p, o, m in partitions])])
    header = messages.RequestHeader(request_api_key=8, request_api_version=VERSION, correlation_id=1, client_id="t")
    response = asyncio.run(api.offset_commit(broker, header, request))
    messages.encode(response, VERSION)
    return [(p.partition_index, p.error_code) for t in response.topics for p in t.partitions]


@pytest.mark.parametrize("metadata", ["m" * 4096, "€" * 1365], ids=["4096 ascii", "4095 bytes of 3-byte chars"])
def test_metadata_up_to_the_limit_is_committed(broker: Broker, metadata: str) -> None:
    assert _commit(broker, [(0, 7, metadata)]) == [(0, ErrorCode.NONE)]
    assert broker.coordinator.offsets.fetch("g", "t", 0).metadata == metadata


@pytest.mark.parametrize("metadata", ["m" * 4097, "€" * 1366], ids=["4097 ascii", "4098 bytes of 3-byte chars"])
def test_metadata_over_the_limit_is_refused_for_that_partition_only(broker: Broker, metadata: str) -> None:
    assert _commit(broker, [(0, 7, metadata), (1, 8, "")]) == [(0, ErrorCode.OFFSET_METADATA_TOO_LARGE),
                                                              (1, ErrorCode.NONE)]
    assert broker.coordinator.offsets.fetch("g", "t", 0) is None
    assert broker.coordinator.offsets.fetch("g", "t", 1).offset == 8


def test_a_commit_that_cannot_be_written_is_an_unknown_server_error_and_not_kept(broker: Broker) -> None:
    assert _commit(broker, [(0, 1, None)]) == [(0, ErrorCode.NONE)]
    store = broker.coordinator.offsets
    broker.partition_log(OFFSETS_TOPIC, store.partition_for("g")).close()  # as at shutdown: appends now fail
    assert _commit(broker, [(0, 2, None), (5, 2, None)]) == [(0, ErrorCode.UNKNOWN_SERVER_ERROR),
                                                            (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert store.fetch("g", "t", 0).offset == 1
