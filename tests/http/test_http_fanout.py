"""Many watch streams on one topic (docs/HTTP.md 7): every watcher gets every record its
node filter lets through, once, in seq order, while writers append concurrently; a
watcher that drops its connection and comes back with Last-Event-ID misses nothing and
gets nothing twice; a writer reads its own write at once.

Method: 40 watchers (tools/testing/sse_crowd.py, one asyncio task each), half of them
filtering one of the writers' nodes; four writer threads append single records with their
node over HTTP; a quarter of the watchers break their connection mid-way. The gateway's
metrics must show pages written straight to waiting streams, so the commit pages' path
(gateway/watch_stream.py take) is what was tested.
"""

import asyncio
import threading

import pytest

from tests.http.test_http_queues import ok
from tools.testing.node_harness import wait_for
from tools.testing.sse_crowd import Crowd, Watcher

pytestmark = pytest.mark.timeout(120)
NODE_ENV = {"TOPICS_TEST_MIN_HEARTBEAT_MS": "200"}
WRITERS, PER_WRITER, WATCHERS = 4, 50, 40


def append_all(node, topic: str, writer: int, seqs: dict, errors: list) -> None:
    try:
        for i in range(PER_WRITER):
            reply = ok(node.http("POST", f"/v0/topics/{topic}", {
                "records": [{"data": {"w": writer, "i": i}, "node": f"n{writer}"}]}))
            seqs[reply["seqs"][0]] = (f"n{writer}", {"w": writer, "i": i})
            diff = ok(node.http("POST", f"/v0/topics/{topic}/diff",
                                {"from_seq": reply["seqs"][0] - 1, "limit": 1}))
            assert diff["records"][0]["$seq"] == reply["seqs"][0]   # read-your-writes
    except BaseException as error:          # the main thread reports it
        errors.append(error)


async def crowd_run(node, topic: str, seqs: dict, errors: list) -> list[Watcher]:
    crowd = Crowd(node.http_port)
    watchers = [Watcher(f"w{k}", [topic], {"heartbeat_ms": 200, **(
        {"node": f"n{k % WRITERS}"} if k % 2 else {})}) for k in range(WATCHERS)]
    for watcher in watchers:
        await crowd.session(watcher)
    tasks = [crowd.start(watcher) for watcher in watchers]
    await wait_async(lambda: all(w.cursor_id for w in watchers), "the streams to open")
    loop = asyncio.get_running_loop()
    threads = [threading.Thread(target=append_all, args=(node, topic, w, seqs, errors))
               for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    await wait_async(lambda: len(seqs) >= WRITERS * PER_WRITER // 3, "a third of the writes")
    for task in tasks[::4]:                 # these drop their connection and come back
        task.cancel()
    await asyncio.gather(*tasks[::4], return_exceptions=True)
    for watcher in watchers[::4]:
        crowd.start(watcher)
    await loop.run_in_executor(None, lambda: [t.join() for t in threads])
    assert not errors, errors
    await wait_async(lambda: all(len(w.records.get(topic, [])) >= expected(w, seqs)
                                 for w in watchers), "every watcher's records", 60)
    await crowd.stop()
    return watchers


async def wait_async(condition, what: str, timeout_s: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def expected(watcher: Watcher, seqs: dict) -> int:
    node = watcher.options.get("node")
    return sum(1 for n, _ in seqs.values() if n != node)


def test_every_watcher_gets_its_records_once_in_order_across_reconnects(node):
    topic, seqs, errors = "fan", {}, []
    assert node.http("PUT", f"/v0/topics/{topic}", {"durability": "memory"}).status == 201
    watchers = asyncio.run(crowd_run(node, topic, seqs, errors))
    for watcher in watchers:
        got = watcher.records[topic]
        node_filter = watcher.options.get("node")
        want = [(seq, data) for seq, (n, data) in sorted(seqs.items()) if n != node_filter]
        assert got == want, (watcher.name, len(got), len(want))
        assert watcher.other_events == []
    assert all(w.streams >= 2 for w in watchers[::4])        # they did come back
    kept = [w for k, w in enumerate(watchers) if k % 4]
    assert all(w.streams == 1 and w.resumes == 0 for w in kept)   # no stream broke
    metrics = node.http("GET", "/v0/metrics", headers={"Accept": "application/json"}).json()
    pages = metrics["watch_pages"]
    assert pages["written_while_waiting"] > 0 and pages["from_commit"] > 0, pages
