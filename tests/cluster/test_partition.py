"""kbroker.cluster.partition: one partition's replication state, with real logs in temporary dirs.

Several Partition objects stand for the replicas of one partition on brokers 1, 2 and 3; a follower's
fetch is a `read` with its replica id followed by an append of what it got to its own log, and the
leader learns the follower's log end offset from the offset of its next fetch, as in Kafka.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kbroker.cluster.model import LeaderAndIsr
from kbroker.cluster.partition import READ_COMMITTED, FollowerState, Partition, ReplicationError, Role
from kbroker.log.partition_log import PartitionLog
from wire.errors import ErrorCode
from wire.records import Record, build_batch, build_end_txn_batch, iter_batches

LAG_MS = 30_000
ACKS_ALL = -1


class Clock:
    """A settable millisecond clock, so lag rules can be tested without waiting 30 s."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def batch(count: int = 1) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_batch([Record(i, now, None, b"value-%d" % i) for i in range(count)])


def replica(tmp_path: Path, broker_id: int, clock: Clock, min_isr: int = 1, proposals: list | None = None) -> Partition:
    log = PartitionLog(tmp_path / f"broker-{broker_id}" / "topic-0")
    propose = (lambda p, proposed: proposals.append(proposed)) if proposals is not None else None
    return Partition("topic", 0, log, broker_id, min_insync_replicas=lambda: min_isr,
                     replica_lag_time_max_ms=LAG_MS, propose_isr=propose, clock=clock)


def lead(partition: Partition, isr: tuple[int, ...] = (1, 2, 3), epoch: int = 1,
         replicas: tuple[int, ...] = (1, 2, 3)) -> Partition:
    partition.make_leader(LeaderAndIsr(partition.local_broker_id, epoch, isr), replicas, 1)
    return partition


def follow(partition: Partition, leader: int = 1, epoch: int = 1) -> Partition:
    partition.make_follower(LeaderAndIsr(leader, epoch, (1, 2, 3)), (1, 2, 3), 1)
    return partition


def fetch(leader: Partition, follower: Partition) -> None:
    """One follower fetch: the leader records the follower's LEO, the follower appends what it got."""
    log = follower.log
    data = leader.read(log.log_end_offset, 1 << 20, replica_id=follower.local_broker_id,
                       current_leader_epoch=leader.leader_epoch)
    leader.update_follower_fetch_state(follower.local_broker_id, log.log_end_offset, log.log_start_offset,
                                       leader.clock(), data.log_end_offset)
    if data.records is not None:
        log.append(data.records.read_bytes(), leader.clock(), coordinator=True)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def trio(tmp_path: Path, clock: Clock) -> tuple[Partition, Partition, Partition]:
    """Broker 1 leads at epoch 1 with ISR [1, 2, 3]; brokers 2 and 3 follow."""
    return lead(replica(tmp_path, 1, clock)), follow(replica(tmp_path, 2, clock)), follow(replica(tmp_path, 3, clock))


def test_becoming_leader_starts_the_epoch_at_the_log_end(tmp_path: Path, clock: Clock) -> None:
    partition = replica(tmp_path, 1, clock)
    partition.log.append(batch(3), clock())
    lead(partition, epoch=4)
    assert (partition.role, partition.leader_epoch, partition.epoch_start_offset) == (Role.LEADER, 4, 3)
    assert partition.log.end_offset_for_epoch(4) == (4, 3)


def test_a_partition_with_no_followers_has_its_log_end_as_high_watermark(tmp_path: Path, clock: Clock) -> None:
    partition = lead(replica(tmp_path, 1, clock), isr=(1,), replicas=(1,))
    partition.append_as_leader(batch(5), clock(), 1)
    assert partition.high_watermark == 5


def test_high_watermark_waits_for_every_isr_member(trio) -> None:
    leader, second, third = trio
    leader.append_as_leader(batch(4), leader.clock(), 1)
    fetch(leader, second)
    fetch(leader, second)  # second is at 4 now
    assert leader.high_watermark == 0  # third has not fetched
    fetch(leader, third)
    fetch(leader, third)
    assert leader.high_watermark == 4


def test_high_watermark_is_the_smallest_isr_log_end_offset(trio) -> None:
    leader, second, third = trio
    leader.append_as_leader(batch(2), leader.clock(), 1)
    for follower in (second, third):
        fetch(leader, follower)
        fetch(leader, follower)
    leader.append_as_leader(batch(3), leader.clock(), 1)
    fetch(leader, second)
    fetch(leader, second)  # second at 5, third still at 2
    assert leader.high_watermark == 2


def test_high_watermark_never_moves_backwards(trio) -> None:
    leader, second, third = trio
    leader.append_as_leader(batch(3), leader.clock(), 1)
    for follower in (second, third):
        fetch(leader, follower)
        fetch(leader, follower)
    assert leader.high_watermark == 3
    leader.update_follower_fetch_state(2, 1, 0, leader.clock(), 3)  # a fetch from an older offset
    assert leader.high_watermark == 3


def test_a_follower_fetch_records_its_log_end_offset_and_caught_up_time(trio, clock: Clock) -> None:
    leader, _, _ = trio
    leader.append_as_leader(batch(2), clock(), 1)
    clock.now += 500
    leader.update_follower_fetch_state(2, 2, 0, clock(), leader.log.log_end_offset)
    state = leader.followers[2]
    assert (state.log_end_offset, state.last_caught_up_time_ms) == (2, clock.now)


def test_a_fetch_reaching_the_previous_fetch_leader_end_counts_as_caught_up_then() -> None:
    state = FollowerState(2)
    state.record_fetch(0, 0, now_ms=1_000, leader_end_offset=5)   # behind: the leader had 5
    state.record_fetch(5, 0, now_ms=2_000, leader_end_offset=9)   # reached 5, the leader now has 9
    assert state.last_caught_up_time_ms == 1_000


def test_a_follower_that_reached_the_high_watermark_in_this_epoch_is_proposed_for_the_isr(
        tmp_path: Path, clock: Clock) -> None:
    proposals: list[LeaderAndIsr] = []
    leader = lead(replica(tmp_path, 1, clock, proposals=proposals), isr=(1, 3))
    second, third = follow(replica(tmp_path, 2, clock)), follow(replica(tmp_path, 3, clock))
    leader.append_as_leader(batch(2), clock(), 1)
    fetch(leader, third)
    fetch(leader, third)   # the HW is 2
    fetch(leader, second)  # second at 0: below the HW
    assert proposals == []
    fetch(leader, second)  # second at 2
    assert [p.isr for p in proposals] == [(1, 2, 3)]
    assert leader.isr == {1, 3} and leader.maximal_isr == {1, 2, 3}


def test_a_follower_behind_the_epoch_start_cannot_join_the_isr(tmp_path: Path, clock: Clock) -> None:
    leader = replica(tmp_path, 1, clock)
    leader.log.append(batch(4), clock())  # written in an earlier epoch
    lead(leader, isr=(1,), epoch=2)        # epoch 2 starts at 4; alone in the ISR, the HW is 4
    leader.update_follower_fetch_state(2, 4, 0, clock(), 4)
    assert leader.expand_candidates() == {2}
    leader2 = replica(tmp_path / "other", 1, clock)
    leader2.log.append(batch(4), clock())
    lead(leader2, isr=(1,), epoch=2)
    leader2.log.update_high_watermark(2)  # pretend the HW lags (as after a restart)
    leader2.followers[2].log_end_offset = 3  # reached the HW, but not the epoch start (4)
    assert leader2.expand_candidates() == frozenset()


def test_an_isr_follower_silent_past_replica_lag_time_max_is_a_shrink_candidate(trio, clock: Clock) -> None:
    leader, second, _ = trio
    leader.append_as_leader(batch(1), clock(), 1)
    clock.now += LAG_MS + 1
    fetch(leader, second)
    fetch(leader, second)  # second keeps up, third says nothing
    assert leader.shrink_candidates() == {3}


def test_an_isr_follower_fetching_within_the_lag_time_stays_in_sync(trio, clock: Clock) -> None:
    leader, second, third = trio
    leader.append_as_leader(batch(1), clock(), 1)
    clock.now += LAG_MS // 2
    for follower in (second, third):
        fetch(leader, follower)
    assert leader.shrink_candidates() == frozenset()


def test_acks_all_is_refused_before_the_append_when_the_isr_is_below_min_insync_replicas(
        tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock, min_isr=2), isr=(1,))
    with pytest.raises(ReplicationError) as refused:
        leader.append_as_leader(batch(), clock(), -1)
    assert refused.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert leader.log.log_end_offset == 0


def test_acks_one_is_appended_when_the_isr_is_below_min_insync_replicas(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock, min_isr=2), isr=(1,))
    leader.append_as_leader(batch(), clock(), 1)
    assert leader.log.log_end_offset == 1


def test_min_insync_replicas_above_the_replica_count_is_capped_at_it(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock, min_isr=3), isr=(1, 2), replicas=(1, 2))
    assert leader.effective_min_isr() == 2
    leader.append_as_leader(batch(), clock(), -1)
    assert leader.log.log_end_offset == 1


def test_the_high_watermark_stays_while_the_isr_is_below_min_insync_replicas(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock, min_isr=2), isr=(1,))
    leader.append_as_leader(batch(2), clock(), 1)
    assert leader.high_watermark == 0


def test_acks_all_is_not_enough_replicas_after_append_when_the_isr_shrank_meanwhile(
        tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock, min_isr=2), isr=(1, 2), replicas=(1, 2))
    second = follow(replica(tmp_path, 2, clock))
    info = leader.append_as_leader(batch(), clock(), -1)
    fetch(leader, second)
    clock.now += LAG_MS + 1
    proposed = leader.maybe_shrink_isr()
    leader.isr_change_confirmed(proposed, LeaderAndIsr(1, 1, (1,), partition_epoch=1))
    leader.log.update_high_watermark(1)  # the HW had reached the append before the ISR shrank
    assert leader.check_enough_replicas_reach_offset(info.last_offset + 1) == \
        (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_acks_all_completes_once_the_high_watermark_passes_the_append(trio) -> None:
    leader, second, third = trio
    info = leader.append_as_leader(batch(2), leader.clock(), -1)
    assert leader.check_enough_replicas_reach_offset(info.last_offset + 1) == (False, ErrorCode.NONE)
    for follower in (second, third):
        fetch(leader, follower)
        fetch(leader, follower)
    assert leader.check_enough_replicas_reach_offset(info.last_offset + 1) == (True, ErrorCode.NONE)


@pytest.mark.parametrize("epoch", [0, 1])
def test_a_leader_and_isr_at_an_older_or_the_same_leader_epoch_is_stale(trio, epoch: int) -> None:
    leader, _, _ = trio
    assert leader.leader_and_isr_error(epoch) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert leader.leader_and_isr_error(2) == ErrorCode.NONE


def test_stop_replica_at_an_older_leader_epoch_is_fenced(trio) -> None:
    leader, _, _ = trio
    assert leader.stop_replica_error(0) == ErrorCode.FENCED_LEADER_EPOCH
    assert [leader.stop_replica_error(e) for e in (-2, -1, 1, 2)] == [ErrorCode.NONE] * 4


def test_a_request_claiming_an_older_epoch_is_fenced_and_a_newer_one_unknown(trio) -> None:
    leader, _, _ = trio
    assert [leader.check_current_leader_epoch(e) for e in (-1, 0, 1, 2)] == [
        ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NONE, ErrorCode.UNKNOWN_LEADER_EPOCH]


def test_a_follower_refuses_leader_only_reads_with_not_leader_or_follower(trio) -> None:
    _, second, _ = trio
    with pytest.raises(ReplicationError) as refused:
        second.read(0, 1024, require_leader=True)
    assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(ReplicationError) as refused:
        second.append_as_leader(batch(), second.clock(), 1)
    assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_consumers_read_up_to_the_high_watermark_and_followers_up_to_the_log_end(trio) -> None:
    leader, second, third = trio
    leader.append_as_leader(batch(1), leader.clock(), 1)
    for follower in (second, third):
        fetch(leader, follower)
        fetch(leader, follower)
    leader.append_as_leader(batch(1), leader.clock(), 1)  # offset 1: not replicated yet
    assert leader.read(1, 1 << 20).records is None
    assert leader.read(1, 1 << 20, replica_id=2).records is not None


def test_a_fetch_from_a_broker_that_is_not_a_replica_is_refused(trio) -> None:
    leader, _, _ = trio
    with pytest.raises(ReplicationError) as with_epoch:
        leader.read(0, 1024, replica_id=7, current_leader_epoch=1)
    with pytest.raises(ReplicationError) as without:
        leader.read(0, 1024, replica_id=7)
    assert (with_epoch.value.error_code, without.value.error_code) == (
        ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_a_fetcher_whose_last_epoch_ended_earlier_here_gets_the_diverging_epoch(tmp_path: Path, clock: Clock) -> None:
    leader = replica(tmp_path, 1, clock)
    lead(leader, isr=(1,), epoch=1)
    leader.append_as_leader(batch(2), clock(), 1)   # epoch 1: offsets 0-1
    lead(leader, isr=(1,), epoch=3)
    leader.append_as_leader(batch(2), clock(), 1)   # epoch 3: offsets 2-3
    lead(leader, isr=(1, 2), epoch=4)
    # the follower has epoch 2 up to offset 5, which this leader never wrote
    data = leader.read(5, 1024, replica_id=2, last_fetched_epoch=2)
    assert (data.diverging_epoch, data.records) == ((1, 2), None)


def test_an_isr_change_applies_only_once_the_controller_confirms_it(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock), isr=(1, 2, 3))
    clock.now += LAG_MS + 1
    proposed = leader.maybe_shrink_isr()
    assert proposed is not None and proposed.isr == (1,)
    assert leader.isr == {1, 2, 3}
    leader.isr_change_confirmed(proposed, LeaderAndIsr(1, 1, (1,), partition_epoch=5))
    assert (leader.isr, leader.partition_epoch, leader.pending_isr) == ({1}, 5, None)


def test_one_isr_change_at_a_time(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock), isr=(1, 2, 3))
    clock.now += LAG_MS + 1
    assert leader.maybe_shrink_isr() is not None
    assert leader.maybe_shrink_isr() is None


def test_an_isr_change_the_controller_did_not_attempt_returns_to_the_committed_isr(
        tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock), isr=(1, 2, 3))
    clock.now += LAG_MS + 1
    proposed = leader.maybe_shrink_isr()
    assert leader.isr_change_failed(proposed, ErrorCode.OPERATION_NOT_ATTEMPTED) is False
    assert (leader.isr, leader.pending_isr) == ({1, 2, 3}, None)


def test_an_isr_change_failing_for_an_unexpected_reason_is_sent_again(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock), isr=(1, 2, 3))
    clock.now += LAG_MS + 1
    proposed = leader.maybe_shrink_isr()
    assert leader.isr_change_failed(proposed, ErrorCode.REQUEST_TIMED_OUT) is True
    assert leader.pending_isr is not None


def test_a_confirmation_at_another_leader_epoch_leaves_the_change_pending(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock), isr=(1, 2, 3))
    clock.now += LAG_MS + 1
    proposed = leader.maybe_shrink_isr()
    leader.isr_change_confirmed(proposed, LeaderAndIsr(1, 0, (1,), partition_epoch=5))
    assert leader.isr == {1, 2, 3} and leader.pending_isr is not None


def test_becoming_follower_clears_the_isr_and_the_followers(trio) -> None:
    leader, _, _ = trio
    follow(leader, leader=2, epoch=2)
    assert (leader.role, leader.leader_id, leader.isr, leader.followers) == (Role.FOLLOWER, 2, frozenset(), {})


def test_a_leader_and_isr_older_than_the_partition_epoch_is_skipped(tmp_path: Path, clock: Clock) -> None:
    partition = replica(tmp_path, 1, clock)
    partition.make_leader(LeaderAndIsr(1, 1, (1, 2), partition_epoch=3), (1, 2), 1)
    assert partition.make_follower(LeaderAndIsr(2, 2, (2,), partition_epoch=2), (1, 2), 1) is False
    assert partition.role == Role.LEADER


# --- transactions: the last stable offset and READ_COMMITTED reads ------------------------------------

TXN_PRODUCER = 77


def txn_batch(sequence: int = 0) -> bytes:
    now = time.time_ns() // 1_000_000
    return build_batch([Record(0, now, None, b"in-txn")], producer_id=TXN_PRODUCER, producer_epoch=0,
                       base_sequence=sequence, is_transactional=True)


def abort_marker() -> bytes:
    return build_end_txn_batch(False, producer_id=TXN_PRODUCER, producer_epoch=0, coordinator_epoch=0,
                               timestamp=time.time_ns() // 1_000_000)


def offsets_read(data) -> list[int]:
    return [header.base_offset for _, header in iter_batches(data.records.read_bytes())] if data.records else []


def test_the_lso_passes_an_abort_marker_only_once_every_isr_member_has_it(tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock), isr=(1, 2), replicas=(1, 2))
    follower = follow(replica(tmp_path, 2, clock))
    leader.append_as_leader(txn_batch(), clock(), 1)  # 0
    fetch(leader, follower)
    fetch(leader, follower)
    assert (leader.high_watermark, leader.log.last_stable_offset) == (1, 0)  # the transaction is open
    leader.append_as_leader(abort_marker(), clock(), ACKS_ALL, coordinator=True)  # 1
    assert leader.log.last_stable_offset == 0
    fetch(leader, follower)  # the follower gets the marker; the leader does not know yet
    assert (leader.high_watermark, leader.log.last_stable_offset) == (1, 0)
    fetch(leader, follower)
    assert (leader.high_watermark, leader.log.last_stable_offset) == (2, 2)


def test_consumers_reading_committed_stop_at_the_lso_and_learn_the_aborted_transactions(
        tmp_path: Path, clock: Clock) -> None:
    leader = lead(replica(tmp_path, 1, clock), isr=(1,), replicas=(1,))
    leader.append_as_leader(batch(), clock(), 1)  # 0
    leader.append_as_leader(txn_batch(), clock(), 1)  # 1
    leader.append_as_leader(batch(), clock(), 1)  # 2
    committed = leader.read(0, 1 << 20, isolation_level=READ_COMMITTED)
    assert (offsets_read(committed), committed.last_stable_offset, committed.aborted_transactions) == ([0], 1, [])
    uncommitted = leader.read(0, 1 << 20)
    assert (offsets_read(uncommitted), uncommitted.last_stable_offset) == ([0, 1, 2], 1)
    assert uncommitted.aborted_transactions is None
    leader.append_as_leader(abort_marker(), clock(), ACKS_ALL, coordinator=True)  # 3
    committed = leader.read(0, 1 << 20, isolation_level=READ_COMMITTED)
    assert (offsets_read(committed), committed.last_stable_offset) == ([0, 1, 2, 3], 4)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(TXN_PRODUCER, 1)]


def test_followers_read_past_the_lso_without_aborted_transactions(trio) -> None:
    leader = trio[0]
    leader.append_as_leader(txn_batch(), leader.clock(), 1)
    leader.append_as_leader(batch(), leader.clock(), 1)
    data = leader.read(0, 1 << 20, replica_id=2, isolation_level=READ_COMMITTED)
    assert (offsets_read(data), data.last_stable_offset, data.aborted_transactions) == ([0, 1], 0, None)
