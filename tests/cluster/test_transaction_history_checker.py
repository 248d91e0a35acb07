"""The transaction history checker (compat-tests/transaction_history.py) finds each kind of broken promise in a
made-up history, and none in a sound one, so that its silence in the kill tests means something."""

from __future__ import annotations

from transaction_history import Verdict, Writer, check, record_value

PARTITIONS = 2
RECORDS = 4


def _writer(outcomes: dict[int, str]) -> Writer:
    writer = Writer("127.0.0.1:1", "history", PARTITIONS, "w", RECORDS)
    writer.outcomes = outcomes
    return writer


def _log(*transactions: int, skip: tuple[tuple[int, int], ...] = ()) -> dict[tuple[int, int], bytes]:
    """The topic as a read_committed consumer would read it: the records of the given transactions, in order."""
    final: dict[tuple[int, int], bytes] = {}
    next_offset = [0] * PARTITIONS
    for number in transactions:
        for index in range(RECORDS):
            partition = index % PARTITIONS
            if (number, index) not in skip:
                final[(partition, next_offset[partition])] = record_value("w", number, index)
            next_offset[partition] += 1
    return final


def _only(verdict: Verdict, text: str) -> bool:
    """The verdict has violations, every one of them the kind named by `text`."""
    assert verdict.violations and all(text in v for v in verdict.violations), verdict.violations
    return True


def test_a_sound_history_has_no_violation() -> None:
    verdict = check([_writer({0: "committed", 1: "aborted", 2: "unknown", 3: "unknown", 4: "committed"})],
                    _log(0, 2, 4), _log(0, 2))
    assert verdict.violations == []
    assert verdict.outcomes == {"committed": 2, "aborted": 1, "unknown": 2}


def test_a_record_of_an_aborted_transaction_read_is_a_violation() -> None:
    assert _only(check([_writer({0: "committed", 1: "aborted"})], _log(0, 1), {}), "(aborted): 4 of its records")


def test_a_committed_transaction_not_read_is_a_violation() -> None:
    assert _only(check([_writer({0: "committed", 1: "committed"})], _log(0), {}), "none of its 4 records read")


def test_a_committed_transaction_read_in_part_is_a_violation() -> None:
    assert _only(check([_writer({0: "committed"})], _log(0, skip=((0, 3),)), {}), "read records [0, 1, 2], not all")


def test_an_unknown_transaction_read_in_part_is_a_violation() -> None:
    assert _only(check([_writer({0: "unknown"})], _log(0, skip=((0, 1),)), {}), "read records [0, 2, 3], not all")


def test_a_record_read_twice_is_a_violation() -> None:
    final = _log(0)
    final[(0, 99)] = record_value("w", 0, 0)
    violations = check([_writer({0: "committed"})], final, {}).violations
    assert any("record 0 read 2 times" in v for v in violations), violations


def test_transactions_read_out_of_send_order_are_a_violation() -> None:
    final = _log(0, 1)
    swapped = {(p, o): final[(p, (o + 2) % 4)] for p, o in final}
    assert _only(check([_writer({0: "committed", 1: "committed"})], swapped, {}), "out of send order")


def test_a_record_nobody_sent_is_a_violation() -> None:
    final = _log(0)
    final[(1, 50)] = b"stranger"
    assert _only(check([_writer({0: "committed"})], final, {}), "b'stranger' is no transaction's record")


def test_a_record_the_live_reader_saw_that_is_gone_later_is_a_violation() -> None:
    violations = check([_writer({0: "committed", 1: "unknown"})], _log(0), _log(0, 1)).violations
    assert violations and all("the live reader saw" in v for v in violations), violations


def test_a_value_the_live_reader_saw_that_changed_at_its_offset_is_a_violation() -> None:
    live = _log(0)
    live[(0, 0)] = record_value("w", 0, 2)
    assert _only(check([_writer({0: "committed"})], _log(0), live), "the live reader saw")


def test_a_record_in_another_partition_than_it_was_sent_to_is_a_violation() -> None:
    final = _log(0)
    final[(1, 0)], final[(0, 0)] = final[(0, 0)], final[(1, 0)]  # records 0 and 1 trade partitions
    violations = check([_writer({0: "committed"})], final, {}).violations
    assert any("record 0 in partition 1, sent to 0" in v for v in violations), violations
