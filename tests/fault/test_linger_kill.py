"""Fault: SIGKILL of the shard that owns a topic while a lingering client batches appends.

Fault K-LINGER-1: one `Client(linger_ms=2)` shared by 16 writer threads appending single
fsync-class records to one topic; SIGKILL its shard mid-stream.
Fault K-LINGER-2: the same with the adaptive linger (`linger_ms="auto"`).
Asserted: every caller is answered (no thread hangs); the topic holds exactly the acked
records, each at the seq its caller was given, seqs dense: a batch whose reply was lost in
the kill is retried under its session key and answered from the dedupe index, not
appended twice; the client carries on after the restart.

Method: writers are threads sharing the client (linger's sender thread sends their
batches); after the victim is back and more appends are acked, the writers stop and the
topic is read in full and compared with the acks.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tools.testing.node_harness import names_on, wait_for

pytestmark = pytest.mark.timeout(180)

WRITERS = 16


@pytest.mark.parametrize("linger_ms", [2, "auto"], ids=["fixed", "auto"])
def test_sigkill_shard_under_lingering_appends(make_node, linger_ms):
    node = make_node(shards=2)
    topic = names_on(1, 1, prefix="lk")[0]
    admin = node.client()
    admin.put_topic(topic, durability="fsync")
    client = node.client(linger_ms=linger_ms, request_timeout_ms=1000,
                         retry_deadline_ms=60_000)
    acked: dict[int, dict] = {}
    errors: list[BaseException] = []
    stop = threading.Event()

    def write(ident: int) -> None:
        n = 0
        try:
            while not stop.is_set():
                data = {"w": ident, "n": n}
                reply = client.append(topic, [{"data": data}])
                acked[reply["first_seq"]] = data
                n += 1
        except BaseException as exc:   # reported by the test, not swallowed
            errors.append(exc)
    threads = [threading.Thread(target=write, args=(i,), daemon=True) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acked) >= 300 or errors, 30, "acks before the kill")
    victim = node.shard_pid(1)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: node.shard_pid(1) not in (0, victim), 60, "the shard's restart")
    after_kill = len(acked)
    wait_for(lambda: len(acked) >= after_kill + 300 or errors, 60, "acks after the restart")
    stop.set()
    for thread in threads:
        thread.join(90)
    assert not [t for t in threads if t.is_alive()], "a writer was never answered"
    assert not errors, errors
    assert client.statistics().linger_requests < client.statistics().linger_appends
    client.close()
    stored, cursor = {}, 0
    while True:
        page = admin.diff(topic, from_seq=cursor, limit=1000)
        stored.update((r["$seq"], r["data"]) for r in page["records"])
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            break
    assert stored == acked
    assert sorted(stored) == list(range(1, len(stored) + 1))
