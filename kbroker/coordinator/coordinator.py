"""The broker's one coordinator object: committed offsets, classic groups and KIP-848 consumer groups."""

from __future__ import annotations

import asyncio
import logging
import time

from kbroker.coordinator.consumer_group_records import ConsumerGroupOffsetStore
from kbroker.coordinator.consumer_groups import ConsumerGroupCoordinator, ConsumerGroupState
from kbroker.coordinator.groups import Group, GroupCoordinator, GroupState, Member
from kbroker.coordinator.offsets import GROUP_VALUE_VERSION, OFFSETS_TOPIC, CoordinatorWriteError, group_store_error
from wire import messages
from wire.errors import ErrorCode

log = logging.getLogger(__name__)
OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000       # offsets.retention.minutes = 10080
OFFSETS_RETENTION_CHECK_S = 600                   # offsets.retention.check.interval.ms


class Coordinator:
    """Built by `Broker.coordinator` (the runner builds it at start, replaying `__consumer_offsets`)."""

    def __init__(self, broker, offsets_retention_ms: int = OFFSETS_RETENTION_MS) -> None:
        self.offsets = ConsumerGroupOffsetStore(broker)  # its replay also rebuilds KIP-848 groups
        self.groups = GroupCoordinator(int(broker.config["group.initial.rebalance.delay.ms"]), self._persist,
                                       max_size=int(broker.config["group.max.size"]),
                                       min_session_timeout_ms=int(broker.config["group.min.session.timeout.ms"]),
                                       max_session_timeout_ms=int(broker.config["group.max.session.timeout.ms"]))
        for group_id, raw in self.offsets.loaded_groups.items():
            try:
                self.groups.groups[group_id] = restore_group(group_id, raw)
            except Exception:
                log.exception("skipping unreadable metadata of group %s", group_id)
        self.offsets_retention_ms = offsets_retention_ms
        self._housekeeping: asyncio.Task | None = None
        config = broker.config
        self.consumer_protocol_enabled = "consumer" in config["group.coordinator.rebalance.protocols"]
        self.consumer_groups = ConsumerGroupCoordinator(
            lambda: broker.known_topics()[0], int(config["group.consumer.heartbeat.interval.ms"]),
            int(config["group.consumer.session.timeout.ms"]), config["group.consumer.assignors"],
            claim_group_id=self._claim_for_consumer_group, persist=self.offsets.write_consumer_group_records)
        self.consumer_groups.load(self.offsets.consumer_groups)

    # --- a cluster: the groups of the partitions this broker leads ------------------------------

    def load_partition(self, partition: int, partition_count: int) -> None:
        """This broker became the leader of `__consumer_offsets`-`partition`: its groups are read
        from the log and served from now on (Kafka's onElection). Nothing if already loaded."""
        store = self.offsets
        if store.owned is None or partition in store.owned:
            return
        store.partitions = partition_count
        store.consumer_groups = {}
        try:
            store.replay_partition(partition)
            for group_id, raw in list(store.loaded_groups.items()):
                if store.partition_for(group_id) == partition and group_id not in self.groups.groups:
                    try:
                        self.groups.adopt(restore_group(group_id, raw))
                    except Exception:
                        log.exception("skipping unreadable metadata of group %s", group_id)
            self.consumer_groups.load(store.consumer_groups)
        except BaseException:
            self._drop_groups(partition)  # nothing half-loaded stays behind
            raise
        finally:
            store.consumer_groups = {}
        store.owned.add(partition)
        log.info("coordinating the groups of %s-%d", OFFSETS_TOPIC, partition)

    def unload_partition(self, partition: int) -> None:
        """Another broker leads `__consumer_offsets`-`partition` now: its groups leave memory, parked
        joins and syncs get NOT_COORDINATOR (Kafka's onResignation)."""
        store = self.offsets
        if store.owned is None or partition not in store.owned:
            return
        store.owned.discard(partition)
        self._drop_groups(partition)
        log.info("no longer coordinating the groups of %s-%d", OFFSETS_TOPIC, partition)

    def _drop_groups(self, partition: int) -> None:
        store = self.offsets
        known = {*store.offsets, *store.loaded_groups, *self.groups.groups, *self.consumer_groups.groups,
                 *store.groups_with_pending_transactions()}
        leaving = [group_id for group_id in known if store.partition_for(group_id) == partition]
        self.groups.unload(leaving)
        self.consumer_groups.unload(leaving)
        store.forget_groups(leaving)

    def _claim_for_consumer_group(self, group_id: str) -> bool:
        """A KIP-848 group may take over an id whose classic group has no members (Kafka deletes
        that empty classic group); a classic group with members keeps its id."""
        classic = self.groups.group(group_id)
        if classic is None:
            return True
        if classic.members or classic.state not in (GroupState.EMPTY, GroupState.DEAD):
            return False
        self.forget_group(group_id)
        return True

    def classic_join_error(self, group_id: str) -> int | None:
        """What a classic JoinGroup for a KIP-848 group's id gets: INCONSISTENT_GROUP_PROTOCOL while
        it has members (kbroker does not mix protocols in one group); an empty one is deleted, as
        Kafka does, and the join goes ahead (None)."""
        group = self.consumer_groups.group(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        self.consumer_groups.forget(group_id)
        return None

    def _persist(self, group: Group) -> asyncio.Future | None:
        """Write the group's metadata record. In a cluster, also the error its replication ends with (Kafka's
        storeGroup: SyncGroup answers once the ISR has it); on a single node nothing to wait for."""
        store = self.offsets
        try:
            end = store.write_group(group.group_id, encode_group(group), time.time_ns() // 1_000_000)
        except CoordinatorWriteError as error:
            return self._settled(group_store_error(error.error_code)) if store.owned is not None else None
        except Exception:  # the group keeps working in memory; only a restart would forget it
            log.exception("could not store the metadata of group %s", group.group_id)
            return None
        if store.owned is None:
            return None
        return asyncio.ensure_future(self._replicated(group.group_id, end))

    @staticmethod
    def _settled(error: int) -> asyncio.Future:
        done = asyncio.get_running_loop().create_future()
        done.set_result(error)
        return done

    async def _replicated(self, group_id: str, end: int) -> int:
        store = self.offsets
        key = (OFFSETS_TOPIC, store.partition_for(group_id))
        errors = await store.broker.replicas.wait_for_acks({key: end},
                                                           int(store.broker.config["offsets.commit.timeout.ms"]))
        return group_store_error(errors.get(key, ErrorCode.NONE))

    def forget_group(self, group_id: str) -> None:
        """Drop a group for good: a tombstone for its metadata record, then out of memory."""
        self.consumer_groups.forget(group_id)
        group = self.groups.groups.pop(group_id, None)
        if group is not None:
            group.state = GroupState.DEAD
        if group is not None or group_id in self.offsets.loaded_groups:
            self.offsets.loaded_groups.pop(group_id, None)
            self.offsets.write_group(group_id, None, time.time_ns() // 1_000_000)

    def start(self) -> None:
        """Start session expiry and the periodic offset expiry (call inside the broker's event loop)."""
        self.groups.start()
        self.consumer_groups.start()
        if self._housekeeping is None:
            self._housekeeping = asyncio.get_running_loop().create_task(self._expire_offsets_forever())

    async def _expire_offsets_forever(self) -> None:
        while True:
            await asyncio.sleep(OFFSETS_RETENTION_CHECK_S)
            try:
                self.expire_offsets(time.time_ns() // 1_000_000)
            except Exception:
                log.exception("offset expiry failed")

    def expire_offsets(self, now_ms: int) -> int:
        """Kafka's offset retention: only groups without members lose offsets, each one
        retention period after its commit or after the group became Empty, whichever is later. A partition
        with offsets pending in a transaction keeps its offset, and a group with any keeps the group (its
        tombstone would withdraw them on replay; Kafka 4 spares them alike)."""
        store = self.offsets
        removed = 0
        for group_id, committed in list(self.offsets.offsets.items()):
            consumer_group = self.consumer_groups.group(group_id)
            if consumer_group is not None and consumer_group.state != ConsumerGroupState.EMPTY:
                continue  # KIP-848 groups keep offsets while they have members
            group = self.groups.group(group_id)
            if group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD):
                continue
            since = group.empty_since_ms if group is not None else 0
            pending = store.pending_partitions(group_id) if store.has_pending_transactions(group_id) else ()
            expired = [tp for tp, c in committed.items()
                       if max(c.commit_timestamp, since) + self.offsets_retention_ms <= now_ms and tp not in pending]
            if expired:
                self.offsets.delete(group_id, expired, now_ms)
                removed += len(expired)
            if group is not None and group.state == GroupState.EMPTY and not self.offsets.group_offsets(group_id) \
                    and not store.has_pending_transactions(group_id):
                self.forget_group(group_id)
        for group_id, consumer_group in list(self.consumer_groups.groups.items()):
            if consumer_group.state == ConsumerGroupState.EMPTY and not self.offsets.group_offsets(group_id) \
                    and not store.has_pending_transactions(group_id):
                self.consumer_groups.forget(group_id)  # an empty KIP-848 group without offsets goes too
        return removed

    def close(self) -> None:
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            self._housekeeping = None
        self.groups.close()
        self.consumer_groups.close()


def encode_group(group: Group) -> bytes:
    """The group as Kafka's GroupMetadataValue (version 3), behind its int16 version."""
    Value = messages.GroupMetadataValue
    MemberMetadata = messages.classes("GroupMetadataValue")["MemberMetadata"]
    stable = group.state == GroupState.STABLE
    members = [MemberMetadata(
        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
        client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
        subscription=m.metadata_for(group.protocol_name) if group.protocol_name else b"",
        assignment=m.assignment) for m in group.members.values()] if stable else []
    value = Value(protocol_type=group.protocol_type or "", generation=group.generation_id,
                  protocol=group.protocol_name if stable else None, leader=group.leader_id if stable else None,
                  current_state_timestamp=group.empty_since_ms if not stable else time.time_ns() // 1_000_000,
                  members=members)
    return GROUP_VALUE_VERSION.to_bytes(2, "big") + bytes(messages.encode(value, GROUP_VALUE_VERSION))


def restore_group(group_id: str, raw: bytes) -> Group:
    """A group as a restarted broker finds it: Stable with its members (whose session timers
    GroupCoordinator.start arms), or Empty."""
    version = int.from_bytes(raw[:2], "big", signed=True)
    value, _ = messages.decode("GroupMetadataValue", version, raw, 2)
    group = Group(group_id)
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    if value.members and value.protocol is not None:
        group.state = GroupState.STABLE
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        for m in value.members:
            group.members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
                m.rebalance_timeout if version >= 1 else m.session_timeout, value.protocol_type,
                [(value.protocol, bytes(m.subscription))], bytes(m.assignment))
    else:
        group.empty_since_ms = max(value.current_state_timestamp, 0)
    return group
