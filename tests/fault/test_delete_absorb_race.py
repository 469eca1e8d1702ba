"""Regression (found by tools/crashtest, seed 2026): a tag delete applied after a checkpoint
barrier, to records still indexed in the WAL, came back once the shard took in that
checkpoint's snapshot (the records then read from segments whose del bytes the compactor
had not flipped yet: it had not seen the Delete frame). Invariant 37 (and 29)."""

from __future__ import annotations

from tests.unit.conftest import data_dir, env, ffs, rec  # noqa: F401  (fixtures)
from topics_actors.protocol.messages import Absorbed, Checkpoint, DeleteRecords


def test_a_tag_delete_after_the_barrier_holds_when_the_snapshot_is_taken_in(env):
    h = env.single()
    h.put("t", durable=True)
    for i in range(6):
        h.append("t", rec(b'{"i":%d}' % i, "drop" if i % 2 else "keep"))
    cp = env.checkpointer(max_events=4)
    reply = h.call(Checkpoint())                                  # the barrier first,
    assert h.call(DeleteRecords("t", match="drop"))["deleted"] == 3   # then the delete
    kept = h.records("t")
    assert [r[3] for r in kept] == ["keep"] * 3
    snap_id = cp.checkpoint({reply["group"]: (reply["idx"], reply["offset"])},
                            accounting=reply["accounting"])
    h.call(Absorbed(snap_id))
    assert h.records("t") == kept
    h.restart(crash=True)
    assert h.records("t") == kept
    cp.close()
    h.crash()
