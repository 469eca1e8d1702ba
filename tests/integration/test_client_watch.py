"""The client library's `watch` (Client and AsyncClient) against a real node: the events
of spec/api.md 7.2 over ZeroMQ, per topic in order; live records answered by a long-poll
(not found by a later poll); resume with `cursor=event["id"]` misses and repeats nothing;
the first-read tombstone relabel; deleted topics end the watch.

Method: a node per module; a watch runs in a thread (blocking client) or a task (async
client); every wait has a timeout.
"""

import asyncio
import threading
import time

import pytest

from tests.support import Node, alive
from topics_actors.client import AsyncClient, ErrorCode, TopicsError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("watch")
    started = Node(str(base / "data"), 2, log_path=str(base / "node.log")).start()
    yield started
    pids = [child.pid for child in started.children()]
    started.stop()
    assert not alive(pids)


def take(events, count: int, timeout_s: float = 10) -> list[dict]:
    """`count` events from a blocking watch, read in a thread so a hang fails the test."""
    out, done = [], threading.Event()

    def run():
        for event in events:
            out.append(event)
            if len(out) == count:
                break
        done.set()
    threading.Thread(target=run, daemon=True).start()
    assert done.wait(timeout_s), f"only {out}"
    return out


def seqs(events) -> list[int]:
    return [r["$seq"] for e in events if e["event"] == "record" for r in e["records"]]


def test_backlog_live_and_resume(node):
    client = node.client()
    client.append("cw-a", [{"data": i} for i in range(1, 4)])
    client.put_topic("cw-b")
    events = client.watch(["cw-a", "cw-b"], limit=2, wait_ms=20_000)
    first = take(events, 4)     # a: 1-2, 3, caught-up; b: caught-up (interleaved)
    by_topic = {t: [e["event"] for e in first if e["topic"] == t] for t in ("cw-a", "cw-b")}
    assert by_topic == {"cw-a": ["record", "record", "caught-up"], "cw-b": ["caught-up"]}
    assert seqs(first) == [1, 2, 3]
    t0 = time.monotonic()
    client.append("cw-b", [{"data": "x", "tag": "t"}])
    live = take(events, 1)[0]
    assert time.monotonic() - t0 < 10                 # the long-poll answered the append
    assert live["event"] == "record" and live["topic"] == "cw-b"
    assert live["records"][0]["data"] == "x" and live["from_seq"] == 0
    resume_at = next(e for e in first if e["event"] == "record")      # processed 1..2
    events.close()
    client.append("cw-a", [{"data": 4}])
    again = client.watch(["cw-a", "cw-b"], cursor=resume_at["id"], limit=2)
    resumed = take(again, 4)
    assert seqs([e for e in resumed if e["topic"] == "cw-a"]) == [3, 4]
    assert seqs([e for e in resumed if e["topic"] == "cw-b"]) == [1]   # b was at 0 then
    again.close()
    with pytest.raises(TopicsError) as caught:
        next(client.watch(["cw-a"], cursor="not-an-id"))
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(TopicsError) as caught:
        next(client.watch(["cw-a", "cw-absent"]))
    assert caught.value.code is ErrorCode.TOPIC_NOT_FOUND


def test_first_read_tombstone_and_deletes_end_the_watch(node):
    client = node.client()
    client.put_topic("cw-cap", cap_records=2)
    client.append("cw-cap", [{"data": i} for i in range(5)])
    events = client.watch({"cw-cap": 0})
    tomb, record, caught = take(events, 3)
    assert tomb["event"] == "tombstone" and tomb["reason"] == "from_seq_too_old"
    assert (tomb["gap_from"], tomb["gap_to"]) == (1, 3)
    assert seqs([record]) == [4, 5] and caught["event"] == "caught-up"
    client.delete_topic("cw-cap")
    gone = take(events, 1)[0]
    assert gone == {"event": "topic-deleted", "id": gone["id"], "topic": "cw-cap",
                    "head_seq": 0, "reason": "deleted"}
    assert take(events, 1) == []        # every topic is gone: the watch ends


def test_the_async_client_watches_too(node):
    async def run():
        async with AsyncClient(node.endpoint, request_timeout_ms=2000) as client:
            await client.append("cw-async", [{"data": 1}])
            events = client.watch({"cw-async": 0}, wait_ms=20_000)
            record = await asyncio.wait_for(events.__anext__(), 10)
            caught = await asyncio.wait_for(events.__anext__(), 10)
            assert seqs([record]) == [1] and caught["event"] == "caught-up"
            await client.append("cw-async", [{"data": 2}])
            live = await asyncio.wait_for(events.__anext__(), 10)
            assert seqs([live]) == [2]
            await events.aclose()
    asyncio.run(run())
