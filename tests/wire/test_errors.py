"""The error-code table in wire/errors.py against the two independent Python copies installed.

Apache Kafka's Errors.java (and its RetriableException hierarchy) is the authority; the table was
written from it. kio's ErrorCode is generated from Kafka and must agree exactly. kafka-python's
errors are hand-maintained, stop at 127 and use some older names; every such difference is listed
below with the reason, so that a new disagreement fails loudly instead of being waved through.
"""

from __future__ import annotations

import inspect

import pytest

from wire.errors import KAFKA_VERSION, RETRIABLE, ErrorCode, from_code, is_retriable, message

HIGHEST = 133  # SHARE_SESSION_LIMIT_REACHED, newest code in released Kafka 4.x (4.1 onwards)

# kafka-python's `message` attribute where it differs from Kafka's enum name (same code, same meaning).
KAFKA_PYTHON_NAMES: dict[int, str] = {
    -1: "UNKNOWN",  # Kafka: UNKNOWN_SERVER_ERROR
    0: "NO_ERROR",  # Kafka: NONE
    6: "NOT_LEADER_FOR_PARTITION",  # Kafka renamed it NOT_LEADER_OR_FOLLOWER in 2.6 (KIP-392 era)
    10: "MESSAGE_SIZE_TOO_LARGE",  # Kafka: MESSAGE_TOO_LARGE
    17: "INVALID_TOPIC",  # Kafka: INVALID_TOPIC_EXCEPTION
    39: "INVALID_REPLICATION_ASSIGNMENT",  # Kafka: INVALID_REPLICA_ASSIGNMENT
}

# Codes whose retriable flag in kafka-python differs from Kafka's Java code, which is authoritative
# because Java clients retry exactly on RetriableException subclasses.
KAFKA_PYTHON_RETRIABLE_DISAGREES: dict[int, str] = {
    2: "CorruptRecordException extends RetriableException in Java; kafka-python marks it not retriable",
}


def kafka_python_errors() -> list[tuple[int, str, bool, str]]:
    """(code, name, retriable, class name) for every kafka-python error class that has a code."""
    errors = pytest.importorskip("kafka.errors")
    rows = []
    for cls_name, cls in inspect.getmembers(errors, inspect.isclass):
        code = getattr(cls, "errno", None)
        if isinstance(code, int):
            rows.append((code, cls.message, bool(cls.retriable), cls_name))
    assert rows, "kafka-python exposes no error classes with errno"
    return rows


def test_kafka_version_documented() -> None:
    assert KAFKA_VERSION.startswith("4.")
    import wire.errors

    assert wire.errors.__doc__ is not None and "4.1" in wire.errors.__doc__


def test_codes_unique() -> None:
    """IntEnum silently turns a repeated value into an alias; there must be none."""
    assert len(ErrorCode.__members__) == len(ErrorCode)
    values = [int(e) for e in ErrorCode]
    assert len(values) == len(set(values))


def test_codes_contiguous_from_minus_one() -> None:
    """Kafka has used every code from -1 up to its newest; so must we."""
    assert sorted(int(e) for e in ErrorCode) == list(range(-1, HIGHEST + 1))
    assert max(ErrorCode) == ErrorCode.SHARE_SESSION_LIMIT_REACHED == HIGHEST


def test_names_are_upper_snake() -> None:
    for e in ErrorCode:
        assert e.name == e.name.upper() and " " not in e.name


@pytest.mark.parametrize(
    ("code", "name", "retriable"),
    [
        (-1, "UNKNOWN_SERVER_ERROR", False),
        (0, "NONE", False),
        (2, "CORRUPT_MESSAGE", True),
        (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
        (6, "NOT_LEADER_OR_FOLLOWER", True),
        (10, "MESSAGE_TOO_LARGE", False),
        (16, "NOT_COORDINATOR", True),
        (35, "UNSUPPORTED_VERSION", False),
        (36, "TOPIC_ALREADY_EXISTS", False),
        (79, "MEMBER_ID_REQUIRED", False),
        (110, "FENCED_MEMBER_EPOCH", False),
        (111, "UNRELEASED_INSTANCE_ID", False),
        (112, "UNSUPPORTED_ASSIGNOR", False),
        (113, "STALE_MEMBER_EPOCH", False),
        (117, "UNKNOWN_SUBSCRIPTION_ID", False),
        (118, "TELEMETRY_TOO_LARGE", False),
        (128, "INVALID_REGULAR_EXPRESSION", False),
        (133, "SHARE_SESSION_LIMIT_REACHED", True),
    ],
)
def test_spot_checks(code: int, name: str, retriable: bool) -> None:
    e = ErrorCode(code)
    assert e.name == name
    assert e.retriable is retriable
    assert is_retriable(code) is retriable
    assert (e in RETRIABLE) is retriable


def test_retriable_set_size() -> None:
    """32 codes map to RetriableException subclasses in Kafka 4.1-4.3."""
    assert len(RETRIABLE) == 32
    assert set(ErrorCode) >= RETRIABLE


def test_messages() -> None:
    for e in ErrorCode:
        text = message(e)
        assert text and text == e.message and text.endswith(".")
    assert "9999" in message(9999)


def test_from_code() -> None:
    assert from_code(3) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert from_code(0) is ErrorCode.NONE
    assert from_code(9999) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert is_retriable(9999) is False


def test_agrees_with_kio() -> None:
    """kio generates its table from Kafka itself, so names and flags must match with no exceptions."""
    kio_errors = pytest.importorskip("kio.schema.errors")
    kio_codes = {int(k): k for k in kio_errors.ErrorCode}
    shared = set(kio_codes) & {int(e) for e in ErrorCode}
    assert shared, "no codes in common with kio"
    for code in sorted(shared):
        ours, theirs = ErrorCode(code), kio_codes[code]
        assert ours.name == theirs.name.upper(), code
        assert ours.retriable is bool(theirs.retriable), code
    # Anything kio knows beyond our table would be a code we missed.
    assert set(kio_codes) <= {int(e) for e in ErrorCode}


def test_agrees_with_kafka_python() -> None:
    rows = kafka_python_errors()
    seen_name_diffs: set[int] = set()
    seen_retriable_diffs: set[int] = set()
    for code, name, retriable, cls_name in rows:
        ours = ErrorCode(code)  # kafka-python must not know a code we lack
        expected_name = KAFKA_PYTHON_NAMES.get(code, ours.name)
        assert name == expected_name, (code, cls_name)
        if code in KAFKA_PYTHON_NAMES:
            seen_name_diffs.add(code)
        if code in KAFKA_PYTHON_RETRIABLE_DISAGREES:
            assert retriable is not ours.retriable, (code, cls_name)
            seen_retriable_diffs.add(code)
        else:
            assert retriable is ours.retriable, (code, cls_name)
    # The exception lists must stay honest: each entry still describes a real difference.
    assert seen_name_diffs == set(KAFKA_PYTHON_NAMES)
    assert seen_retriable_diffs == set(KAFKA_PYTHON_RETRIABLE_DISAGREES)


def test_kafka_python_coverage() -> None:
    """kafka-python 3.0.12 defines -1..127; our table must be a superset with nothing skipped."""
    codes = {code for code, *_ in kafka_python_errors()}
    assert codes <= {int(e) for e in ErrorCode}
    assert set(range(-1, max(codes) + 1)) <= codes | {int(e) for e in ErrorCode}
