"""kbroker's replica placement and leader elections against Kafka 3.9's own classes, case by case.

compat-tests/java/ClusterRulesHarness.java runs AdminUtils.assignReplicasToBrokers,
AdminZkClient.createNewPartitionsAssignment and kafka.controller.Election from the kafka-3.9 jar set in one JVM
per module; each test sends it thousands of cases from a seeded generator (1-12 brokers, with or without racks,
partition counts, replication factors, ISR and liveness subsets) and asserts kbroker's answers are identical,
errors and their texts included. Randomness is taken out of placement by fixing the start index, or by reseeding
Kafka's own Random and reading back the start and shift it draws.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kbroker.cluster.elections import (
    ElectionResult,
    ReplicaLiveness,
    elect_controlled_shutdown,
    elect_offline,
    elect_preferred,
    elect_reassign,
    initial_leadership,
)
from kbroker.cluster.model import LeaderAndIsr, ReplicaAssignment
from kbroker.cluster.placement import (
    BrokerMetadata,
    PlacementError,
    _scala_set,
    assign_replicas_to_brokers,
    metadata_cache_order,
    new_partitions_assignment,
)

COMPAT_TESTS = Path(__file__).resolve().parents[2] / "compat-tests"
sys.path.insert(0, str(COMPAT_TESTS))

import java_harness  # noqa: E402
import maven_jars  # noqa: E402

CASES = 1500  # per test; one JVM answers them all in a second or two
RACK_NAMES = ["rack-a", "rack-b", "rack-c", "r1", "R1", "z", "é", "\U0001f600", "\uff21"]  # \uff21 > surrogates


class KafkaRules:
    """The harness JVM: JSON cases in, JSON answers out, in order."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, encoding="utf-8", bufsize=1 << 16)

    def ask(self, cases: list[dict]) -> list[dict]:
        """Kafka's answer to every case; a writer thread keeps both pipes moving."""
        assert self.process.stdin is not None and self.process.stdout is not None
        payload = "".join(json.dumps(case) + "\n" for case in cases)
        writer = threading.Thread(target=self._write, args=(payload,), daemon=True)
        writer.start()
        answers = []
        for _ in cases:
            line = self.process.stdout.readline()
            if not line:
                pytest.fail(f"the Kafka rules harness exited (code {self.process.poll()})", pytrace=False)
            answers.append(json.loads(line))
        writer.join()
        return answers

    def _write(self, payload: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(payload)
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaRules]:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        java_harness.unavailable("no JDK on PATH (javac/java): install openjdk-17-jdk-headless")
    try:
        classpath = maven_jars.classpath("kafka-3.9")
    except maven_jars.JarsUnavailable as error:
        java_harness.unavailable(f"the kafka-3.9 jars: {error}")
    build = tmp_path_factory.mktemp("cluster-rules")
    source = COMPAT_TESTS / "java" / "ClusterRulesHarness.java"
    compiled = subprocess.run([javac, "-nowarn", "-d", str(build), "-cp", classpath, str(source)],
                              capture_output=True, text=True, timeout=180, check=False)
    if compiled.returncode != 0:
        pytest.fail(f"javac failed on ClusterRulesHarness.java:\n{compiled.stderr}", pytrace=False)
    rules = KafkaRules([java, *java_harness.JVM_OPTIONS, "-cp", f"{build}:{classpath}", "ClusterRulesHarness"])
    yield rules
    rules.close()


# ---- generators ----------------------------------------------------------------------------------------------

def _broker_ids(rng: random.Random, low: int = 1) -> list[int]:
    """1-12 distinct ids, sometimes contiguous from 0, sometimes sparse; in a random order."""
    count = rng.randint(low, 12)
    pool = range(count) if rng.random() < 0.4 else range(rng.choice([20, 100, 1000]))
    ids = rng.sample(pool, count)
    return ids if rng.random() < 0.5 else sorted(ids)


def _brokers(rng: random.Random, racks: bool) -> list[list]:
    names = rng.sample(RACK_NAMES, rng.randint(1, 4))
    return [[broker, rng.choice(names) if racks else None] for broker in _broker_ids(rng)]


def _assign_case(rng: random.Random, racks: bool) -> dict:
    brokers = _brokers(rng, racks)
    return {"op": "assign", "brokers": brokers, "partitions": rng.randint(1, 40),
            "rf": rng.randint(1, len(brokers)), "fixed_start": rng.randint(0, 2 * len(brokers)),
            "start_partition": rng.choice([0, 0, rng.randint(1, 30)]), "seed": None}


def _metadata(brokers: list[list]) -> list[BrokerMetadata]:
    return [BrokerMetadata(broker, rack) for broker, rack in brokers]


def _rows(placed: dict[int, object]) -> list[list]:
    return [[p, list(getattr(r, "replicas", r))] for p, r in sorted(placed.items())]


def _error(error: PlacementError) -> dict:
    return {"error": error.error_code.name, "message": str(error)}


def _ours_assign(case: dict, start: int | None = None, shift: int | None = None) -> dict:
    fixed = case["fixed_start"]
    try:
        placed = assign_replicas_to_brokers(
            _metadata(case["brokers"]), case["partitions"], case["rf"],
            start_index=start if start is not None else (fixed if fixed >= 0 else None), replica_shift=shift,
            start_partition_id=case["start_partition"])
    except PlacementError as error:
        return _error(error)
    return {"assignment": _rows(placed)}


def _theirs(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k not in ("exception", "start", "shift")}


def _compare(kafka: KafkaRules, cases: list[dict], ours: Callable[[dict, dict], dict]) -> None:
    answers = kafka.ask(cases)
    mismatches = [(case, theirs, mine) for case, answer in zip(cases, answers, strict=True)
                  if (theirs := _theirs(answer)) != (mine := ours(case, answer))]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ from Kafka 3.9; first: {mismatches[0]}"


# ---- placement ---------------------------------------------------------------------------------------------

def test_rack_unaware_placement_matches_kafka(kafka: KafkaRules) -> None:
    rng = random.Random(1401)
    _compare(kafka, [_assign_case(rng, racks=False) for _ in range(CASES)], lambda case, _: _ours_assign(case))


def test_rack_aware_placement_matches_kafka(kafka: KafkaRules) -> None:
    rng = random.Random(1402)
    _compare(kafka, [_assign_case(rng, racks=True) for _ in range(CASES)], lambda case, _: _ours_assign(case))


def test_random_start_and_shift_place_as_kafka_draws_them(kafka: KafkaRules) -> None:
    """Kafka's unfixed start index and follower shift (two independent draws) lead to the same layout here."""
    rng = random.Random(1403)
    cases = []
    for _ in range(CASES):
        case = _assign_case(rng, racks=rng.random() < 0.5)
        cases.append({**case, "fixed_start": -1, "seed": rng.getrandbits(48)})
    _compare(kafka, cases, lambda case, answer: _ours_assign(case, answer["start"], answer["shift"]))


def test_placement_errors_match_kafka(kafka: KafkaRules) -> None:
    rng = random.Random(1404)
    cases = []
    for _ in range(CASES // 3):
        case = _assign_case(rng, racks=rng.random() < 0.5)
        broken = rng.choice(["partitions", "rf_zero", "rf_large", "partial_racks"])
        if broken == "partitions":
            case["partitions"] = rng.randint(-3, 0)
        elif broken == "rf_zero":
            case["rf"] = rng.randint(-2, 0)
        elif broken == "rf_large":
            case["rf"] = len(case["brokers"]) + rng.randint(1, 3)
        else:
            case["brokers"] = [[b, "r" if i % 2 else None] for i, (b, _) in enumerate(case["brokers"])]
        cases.append(case)
    _compare(kafka, cases, lambda case, _: _ours_assign(case))


# ---- CreatePartitions ------------------------------------------------------------------------------------------

def _existing(rng: random.Random, broker_ids: list[int]) -> dict[int, list[int]]:
    """A topic's current layout: as Kafka placed it, or any replicas of one replication factor."""
    rf = rng.randint(1, len(broker_ids))
    count = rng.randint(1, 12)
    if rng.random() < 0.5:
        start = rng.randrange(len(broker_ids))
        placed = assign_replicas_to_brokers([BrokerMetadata(b) for b in broker_ids], count, rf, start_index=start)
        return {p: list(r) for p, r in placed.items()}
    universe = broker_ids + [max(broker_ids) + 1 + i for i in range(rng.randint(0, 2))]  # brokers since gone
    return {p: rng.sample(universe, min(rf, len(universe))) for p in range(count)}


def _new_partitions_case(rng: random.Random, proposed: bool) -> dict:
    racks = rng.random() < 0.3
    brokers = sorted(_brokers(rng, racks))
    existing = _existing(rng, [b for b, _ in brokers])
    count = len(existing) + rng.randint(-1, 12) if not proposed else len(existing) + rng.randint(1, 8)
    case = {"op": "new_partitions", "topic": "orders", "existing": sorted(existing.items()), "brokers": brokers,
            "count": count, "proposed": None}
    if proposed:
        case["proposed"] = [[p, _proposal(rng, brokers, len(existing[0]))] for p in range(len(existing), count)]
    return case


def _proposal(rng: random.Random, brokers: list[list], rf: int) -> list[int]:
    ids = [b for b, _ in brokers]
    kind = rng.choices(["good", "empty", "duplicate", "unknown", "other_rf"], weights=[6, 1, 1, 1, 1])[0]
    if kind == "empty":
        return []
    if kind == "duplicate":
        return [rng.choice(ids)] * 2 + rng.sample(ids, min(rf, len(ids)) - 1)
    if kind == "unknown":
        return [*rng.sample(ids, min(rf, len(ids)) - 1), 5000 + rng.randint(0, 3)]
    if kind == "other_rf":
        return rng.sample(ids, rng.randint(1, len(ids)))
    return rng.sample(ids, min(rf, len(ids)))


def _ours_new_partitions(case: dict, _: dict) -> dict:
    existing = {p: ReplicaAssignment(tuple(r)) for p, r in case["existing"]}
    proposed = None if case["proposed"] is None else {p: r for p, r in case["proposed"]}
    try:
        placed = new_partitions_assignment(case["topic"], existing, _metadata(case["brokers"]), case["count"],
                                           proposed)
    except PlacementError as error:
        return _error(error)
    return {"assignment": _rows(placed)}


def test_create_partitions_placement_matches_kafka(kafka: KafkaRules) -> None:
    rng = random.Random(1405)
    _compare(kafka, [_new_partitions_case(rng, proposed=False) for _ in range(CASES)], _ours_new_partitions)


def test_create_partitions_assignment_validation_matches_kafka(kafka: KafkaRules) -> None:
    rng = random.Random(1406)
    _compare(kafka, [_new_partitions_case(rng, proposed=True) for _ in range(CASES)], _ours_new_partitions)


def test_scala_set_order_of_error_texts_matches_scala(kafka: KafkaRules) -> None:
    """The broker and partition lists in Kafka's texts come out in Scala's set order; ours must too."""
    rng = random.Random(1407)
    cases = []
    for _ in range(CASES):
        bound = rng.choice([8, 40, 5000])
        cases.append({"op": "scala_set", "elements": [rng.randrange(bound) for _ in range(rng.randint(0, 40))]})
    _compare(kafka, cases, lambda case, _: {"elements": _scala_set(case["elements"])})


def test_metadata_cache_broker_order_matches_scalas_long_map(kafka: KafkaRules) -> None:
    """CreateTopics places over the live brokers in ZkMetadataCache's LongMap order; ours must list them alike."""
    rng = random.Random(1408)
    cases = []
    for _ in range(CASES):
        keys = _broker_ids(rng) if rng.random() < 0.8 else rng.sample(range(1 << 20), rng.randint(1, 60))
        cases.append({"op": "long_map", "keys": keys, "initial": rng.choice([0, 1, len(keys), rng.randint(0, 70)])})
    _compare(kafka, cases, lambda case, _: {"elements": metadata_cache_order(case["keys"], case["initial"])})


# ---- elections ---------------------------------------------------------------------------------------------

def _election_case(rng: random.Random, kind: str) -> dict:
    universe = list(range(12))
    replicas = rng.sample(universe, rng.randint(1, 6))
    adding: list[int] = []
    removing: list[int] = []
    if kind == "reassign":
        target = rng.sample(universe, rng.randint(1, 5))
        full = list(dict.fromkeys(target + replicas))
        adding = [r for r in full if r not in replicas]
        removing = [r for r in full if r not in target]
        replicas = full
    isr_pool = replicas + ([rng.choice(universe)] if rng.random() < 0.1 else [])
    isr = rng.sample(sorted(set(isr_pool)), rng.randint(0, len(set(isr_pool))))
    registered = [b for b in universe if rng.random() < rng.choice([0.3, 0.6, 0.9])]
    shutting_down = [b for b in universe if rng.random() < (0.3 if kind == "shutdown" else 0.08)]
    offline_dirs = [b for b in universe if rng.random() < 0.08]
    return {"op": "elect", "kind": kind, "replicas": replicas, "adding": adding, "removing": removing,
            "leader": rng.choice([*replicas, -1]), "leader_epoch": rng.randint(0, 50), "isr": isr,
            "recovery": rng.choice([0, 0, 1]), "partition_epoch": rng.randint(0, 40), "registered": registered,
            "shutting_down": shutting_down, "offline_dirs": offline_dirs, "unclean": rng.random() < 0.5,
            "recovery_supported": rng.random() < 0.8}


def _ours_election(case: dict, _: dict) -> dict:
    liveness = ReplicaLiveness.of(case["registered"], case["shutting_down"], case["offline_dirs"])
    current = LeaderAndIsr(case["leader"], case["leader_epoch"], tuple(case["isr"]), case["recovery"],
                           case["partition_epoch"])
    replicas, kind = case["replicas"], case["kind"]
    if kind == "new":
        state = initial_leadership(replicas, liveness)
        result = ElectionResult(state, state.isr if state else ())
    elif kind == "offline":
        result = elect_offline(replicas, current, liveness, case["unclean"], case["recovery_supported"])
    elif kind == "reassign":
        assignment = ReplicaAssignment(tuple(replicas), tuple(case["adding"]), tuple(case["removing"]))
        result = elect_reassign(assignment, current, liveness)
    elif kind == "preferred":
        result = elect_preferred(replicas, current, liveness)
    else:
        result = elect_controlled_shutdown(replicas, current, liveness)
    return {"leader_and_isr": _state(result.leader_and_isr), "recipients": list(result.recipients)}


def _state(state: LeaderAndIsr | None) -> dict | None:
    if state is None:
        return None
    return {"leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr),
            "recovery": state.leader_recovery_state, "partition_epoch": state.partition_epoch}


def _elections(kafka: KafkaRules, kind: str, seed: int) -> None:
    rng = random.Random(seed)
    _compare(kafka, [_election_case(rng, kind) for _ in range(CASES)], _ours_election)


def test_offline_partition_election_matches_kafka(kafka: KafkaRules) -> None:
    _elections(kafka, "offline", 1410)


def test_reassignment_election_matches_kafka(kafka: KafkaRules) -> None:
    _elections(kafka, "reassign", 1411)


def test_preferred_replica_election_matches_kafka(kafka: KafkaRules) -> None:
    _elections(kafka, "preferred", 1412)


def test_controlled_shutdown_election_matches_kafka(kafka: KafkaRules) -> None:
    _elections(kafka, "shutdown", 1413)


def test_new_partition_leadership_matches_kafka(kafka: KafkaRules) -> None:
    _elections(kafka, "new", 1414)
