"""The Jepsen oracle's verdicts (tools/jepsen/oracle.py) on hand-made ledgers and copies.

Above all a power loss of every node: a `disk` topic may lose only a tail and never issues
a lost seq again; a `memory` topic takes no head reservations, so after that power loss it
may issue a lost seq again (docs/DURABILITY.md 3), which the oracle allows only for a
record stored after the loss, and only where the loss is a tail. Method: a fake writer
(ack_log, ack_times) and reader (seen, changed), copies as {seq: envelope}.
"""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from tools.jepsen import oracle

pytestmark = pytest.mark.timeout(10)

LOSS_AT = 10.0      # time.monotonic() of the power loss of every node


@dataclasses.dataclass
class FakeWriter:
    ack_log: list
    ack_times: list
    sent: int
    in_doubt: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class FakeReader:
    seen: dict
    changed: list = dataclasses.field(default_factory=list)


def writer(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> FakeWriter:
    """(seq, number) acks before the power loss (at 1, 2, ...) and after it (at 11, ...)."""
    times = [1.0 + i for i in range(len(before))] + [11.0 + i for i in range(len(after))]
    numbers = [n for _, n in before + after]
    return FakeWriter(before + after, times, max(numbers, default=0))


def copy(held: dict[int, int]) -> dict[int, bytes]:
    return {seq: orjson.dumps({"d": {"n": n}}) for seq, n in held.items()}


def verdict(durability, w, held, reader=None, losses=(LOSS_AT,)):
    found = {nid: copy(held) for nid in ("n1", "n2", "n3")}
    return oracle.check_topic(durability, w, reader, found, list(losses))


# five acked before the loss; seqs 4 and 5 lost and issued again to n=6 and n=7
BEFORE = [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
AFTER = [(4, 6), (5, 7), (6, 8)]
REISSUED = {1: 1, 2: 2, 3: 3, 4: 6, 5: 7, 6: 8}


def test_a_memory_topic_may_issue_a_lost_tail_again_after_a_power_loss_of_every_node():
    reader = FakeReader({4: (4, 2.5)}, [(4, 4, 2.5, 6, 12.0, "n1")])
    result = verdict("memory", writer(BEFORE, AFTER), REISSUED, reader)
    assert result.violations == [] and result.lost_allowed == 2


def test_a_disk_topic_that_issues_a_lost_seq_again_is_a_violation():
    result = verdict("disk", writer(BEFORE, AFTER), REISSUED)
    kinds = {line.split(":")[0] for line in result.violations}
    assert {"order", "reuse"} <= kinds, result.violations


def test_a_memory_seq_issued_again_without_a_power_loss_is_a_violation():
    result = verdict("memory", writer(BEFORE, AFTER), REISSUED, losses=())
    kinds = {line.split(":")[0] for line in result.violations}
    assert {"order", "reuse", "acked"} <= kinds, result.violations


def test_a_memory_loss_that_is_not_a_tail_is_a_violation():
    # seq 3 issued again while the later acked seq 4 survived: the head went backwards
    held = {1: 1, 2: 2, 3: 6, 4: 4, 5: 5, 6: 7}
    result = verdict("memory", writer(BEFORE, [(3, 6), (6, 7)]), held)
    assert any(line.startswith("tail:") for line in result.violations), result.violations


def test_a_memory_seq_taken_by_a_record_from_before_the_power_loss_is_a_violation():
    # n=5 was acked at seq 5 before the loss; it may not stand at the lost seq 4 instead
    held = {1: 1, 2: 2, 3: 3, 4: 5, 5: 5}
    result = verdict("memory", writer(BEFORE, []), held)
    assert any(line.startswith("acked:") for line in result.violations), result.violations


def test_a_memory_record_read_after_the_power_loss_must_stay():
    reader = FakeReader({4: (6, 12.0)}, [(4, 6, 12.0, 9, 13.0, "n2")])
    held = {**REISSUED, 4: 9}
    result = verdict("memory", FakeWriter(BEFORE + AFTER[1:], [1, 2, 3, 4, 5, 11, 12], 9),
                     held, reader)
    assert result.violations == [
        "read: seq 4 read as n=6, then as n=9 through n2",
        *(f"read: {nid}: seq 4 was read as n=6, the copy holds 9" for nid in ("n1", "n2", "n3"))]
