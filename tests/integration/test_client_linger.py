"""Client linger (issue 18 item 2) against a real node: concurrent single appends to one
topic travel as one Append and each caller gets its own seqs.

Method: one node (supervisor + 2 shards) for the module, a topic per test. Batching is
asserted through counts, never through timing: the client's statistics() (requests sent
for its lingering appends) and the owning shard's `requests` counter. A long linger
(LONG_LINGER_MS) with the batch bound set to the number of callers makes the batch go out
when the last caller joins, so a test does not wait for the timer. The adaptive linger
(linger_ms "auto") sends at once while nothing of the topic is in flight: its tests count
requests sent at once (statistics().linger_requests_at_once), and hold a request in flight
by SIGSTOPping the owning shard until the appends behind it are seen waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading

import pytest

from topics_actors.client import AsyncClient, Client, ErrorCode, TopicsError
from topics_actors.client.linger_sender import LingerSender
from topics_actors.topic_identity import shard_of_name
from tests.support import Node, wait_for

pytestmark = pytest.mark.timeout(90)

CALLERS = 40
LONG_LINGER_MS = 1_000
SHARDS = 2


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("linger")
    with Node(str(base / "data"), SHARDS, log_path=str(base / "node.log")) as started:
        yield started


def shard_requests(client: Client, topic: str) -> int:
    """The `requests` counter of the shard owning `topic`."""
    return client.shard_statuses()[shard_of_name(topic, SHARDS)]["statistics"]["requests"]


@contextlib.contextmanager
def shard_stopped(node, topic: str):
    """The shard owning `topic` SIGSTOPped for the block (well under the supervisor's
    heartbeat deadline, 10 s: the tests leave as soon as the appends wait)."""
    pid = node.shard_pid(shard_of_name(topic, SHARDS))
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def run_threads(count: int, work) -> list:
    """Run work(i) in `count` threads started together; their results (or exceptions)."""
    results: list = [None] * count
    barrier = threading.Barrier(count)

    def run(i):
        barrier.wait(10)
        try:
            results[i] = work(i)
        except Exception as error:  # noqa: BLE001 - returned to the test, which asserts it
            results[i] = error
    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return results


def check_own_seqs(client: Client, topic: str, replies: list, sizes: list[int]) -> None:
    """Each caller's seqs are its own contiguous range, they tile 1..total, and the
    records stored at them are the caller's."""
    ranges = []
    for i, (reply, size) in enumerate(zip(replies, sizes)):
        assert isinstance(reply, dict), reply
        assert reply["count"] == size and reply["last_seq"] - reply["first_seq"] == size - 1
        assert reply["seqs"] == list(range(reply["first_seq"], reply["last_seq"] + 1))
        assert reply["head_seq"] >= reply["last_seq"] and reply["deduped"] is False
        ranges.append((reply["first_seq"], i, size))
    ranges.sort()
    total = sum(sizes)
    assert [r[0] for r in ranges] == [1 + sum(r[2] for r in ranges[:k])
                                      for k in range(len(ranges))]
    records = client.diff(topic, limit=1000)["records"]
    assert [r["$seq"] for r in records] == list(range(1, total + 1))
    by_seq = {r["$seq"]: r["data"] for r in records}
    for first, i, size in ranges:
        assert [by_seq[first + k] for k in range(size)] == [[i, k] for k in range(size)]


def test_sync_linger_batches_concurrent_appends_and_answers_each_caller(node):
    plain = node.client()
    plain.put_topic("ls1", durability="fsync")
    before = shard_requests(plain, "ls1")
    sizes = [1 if i % 4 else 3 for i in range(CALLERS)]
    with node.client(linger_ms=LONG_LINGER_MS,
                     linger_batch_records_max=sum(sizes)) as lingering:
        replies = run_threads(CALLERS, lambda i: lingering.append(
            "ls1", [{"data": [i, k]} for k in range(sizes[i])]))
        stats = lingering.statistics()
    check_own_seqs(plain, "ls1", replies, sizes)
    assert stats.linger_appends == CALLERS and stats.linger_waiting == 0
    assert 1 <= stats.linger_requests < CALLERS
    assert shard_requests(plain, "ls1") - before < CALLERS    # fewer requests than appends
    assert not [t for t in threading.enumerate() if t.name == "topics-client-linger"]


def test_async_linger_batches_concurrent_appends_and_answers_each_caller(node):
    plain = node.client()
    plain.put_topic("la1", durability="fsync")
    before = shard_requests(plain, "la1")
    sizes = [1 if i % 4 else 3 for i in range(CALLERS)]

    async def run():
        async with AsyncClient(node.endpoint, linger_ms=LONG_LINGER_MS,
                               linger_batch_records_max=sum(sizes)) as client:
            replies = await asyncio.gather(*(
                client.append("la1", [{"data": [i, k]} for k in range(sizes[i])])
                for i in range(CALLERS)))
            return replies, client.statistics()
    replies, stats = asyncio.run(run())
    check_own_seqs(plain, "la1", replies, sizes)
    assert stats.linger_appends == CALLERS and stats.linger_requests == 1
    assert shard_requests(plain, "la1") - before < CALLERS


def test_a_bad_record_fails_only_its_own_caller(node):
    """A tag longer than 256 bytes passes the client's checks and fails the batch in the
    shard: the batch is sent again one caller at a time, so only that caller fails."""
    plain = node.client()
    plain.put_topic("lb1")
    plain.put_topic("lb2")
    bad = {3, 17}

    def record(i):
        return {"data": [i, 0], "tag": "x" * (300 if i in bad else 1)}
    with node.client(linger_ms=LONG_LINGER_MS, linger_batch_records_max=CALLERS) as client:
        replies = run_threads(CALLERS, lambda i: client.append("lb1", [record(i)]))
        assert client.statistics().linger_split_batches >= 1
    for i in bad:
        assert isinstance(replies[i], TopicsError), replies[i]
        assert replies[i].code is ErrorCode.INVALID_REQUEST
    good = [r for i, r in enumerate(replies) if i not in bad]
    assert sorted(r["first_seq"] for r in good) == list(range(1, CALLERS - len(bad) + 1))

    async def run():
        async with AsyncClient(node.endpoint, linger_ms=LONG_LINGER_MS,
                               linger_batch_records_max=CALLERS) as client:
            out = await asyncio.gather(*(client.append("lb2", [record(i)])
                                         for i in range(CALLERS)), return_exceptions=True)
            return out, client.statistics()
    out, stats = asyncio.run(run())
    assert stats.linger_split_batches == 1
    assert [i for i, r in enumerate(out) if isinstance(r, TopicsError)] == sorted(bad)
    assert sorted(r["first_seq"] for r in out if isinstance(r, dict)) == \
        list(range(1, CALLERS - len(bad) + 1))


def test_a_record_the_client_refuses_fails_at_once_and_alone(node):
    with node.client(linger_ms=LONG_LINGER_MS) as client:
        with pytest.raises(TopicsError) as raised:
            client.append("lc1", [{"no-data": 1}])
        assert raised.value.code is ErrorCode.INVALID_REQUEST
        assert client.statistics().linger_appends == 0


def test_appends_with_their_own_options_go_alone(node):
    """An idempotency_key or a config keeps its append out of batches: sent as given."""
    with node.client(linger_ms=5) as client:
        first = client.append("ld1", [{"data": 1}], idempotency_key="k1")
        again = client.append("ld1", [{"data": 1}], idempotency_key="k1")
        assert (first["first_seq"], again["first_seq"], again["deduped"]) == (1, 1, True)
        made = client.append("ld2", [{"data": 1}], config={"durability": "memory"})
        assert made["created"] is True
        assert client.get_topic("ld2")["config"]["durability"] == "memory"
        lone = client.append("ld1", [{"data": 2}], node="n1", return_seqs=False)
        assert "seqs" not in lone and lone["first_seq"] == 2
        assert client.diff("ld1", from_seq=1)["records"][0]["$node"] == "n1"
        assert client.statistics().linger_requests == 4


def test_linger_zero_is_the_plain_client(node):
    threads_before = threading.active_count()
    with node.client() as client:
        assert client._linger is None and threading.active_count() == threads_before
        reply = client.append("le1", [{"data": 1}, {"data": 2}])
        assert {k: reply[k] for k in ("first_seq", "last_seq", "seqs", "count")} == \
            {"first_seq": 1, "last_seq": 2, "seqs": [1, 2], "count": 2}
        assert client.statistics().linger_requests == 0

    async def run():
        async with AsyncClient(node.endpoint) as client:
            return await client.append("le1", [{"data": 3}]), client.statistics()
    reply, stats = asyncio.run(run())
    assert reply["seqs"] == [3] and stats.linger_appends == 0


def test_closing_a_sync_client_sends_the_waiting_appends_and_ends_its_thread(node):
    client = node.client(linger_ms=LONG_LINGER_MS)
    sender = client._linger
    assert isinstance(sender, LingerSender) and sender.alive()
    results: list = [None] * 8

    def append(i):
        results[i] = client.append("lf1", [{"data": i}])
    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    wait_for(lambda: client.statistics().linger_waiting == 8, 10, "the appends to wait")
    client.close()             # long before linger_ms: the close sends them
    for thread in threads:
        thread.join(10)
    assert sorted(r["first_seq"] for r in results) == list(range(1, 9))
    assert not sender.alive()
    assert not [t for t in threading.enumerate() if t.name == "topics-client-linger"]
    with pytest.raises(TopicsError):
        client.append("lf1", [{"data": 9}])


def test_closing_an_async_client_sends_the_waiting_appends(node):
    async def run():
        client = AsyncClient(node.endpoint, linger_ms=LONG_LINGER_MS)
        tasks = [asyncio.create_task(client.append("lg1", [{"data": i}])) for i in range(8)]
        while client.statistics().linger_waiting < 8:
            await asyncio.sleep(0.01)
        await client.close()
        assert all(task.done() for task in tasks)
        with pytest.raises(TopicsError):
            await client.append("lg1", [{"data": 9}])
        return [task.result() for task in tasks]
    replies = asyncio.run(run())
    assert sorted(r["first_seq"] for r in replies) == list(range(1, 9))


def test_a_refusal_of_the_whole_topic_is_every_callers_error_without_a_split(node):
    async def run():
        async with AsyncClient(node.endpoint, linger_ms=LONG_LINGER_MS,
                               linger_batch_records_max=5) as client:
            out = await asyncio.gather(*(client.append("lh-missing", [{"data": i}],
                                                       create=False)
                                         for i in range(5)), return_exceptions=True)
            return out, client.statistics()
    out, stats = asyncio.run(run())
    assert all(isinstance(r, TopicsError) and r.code is ErrorCode.TOPIC_NOT_FOUND
               for r in out), out
    assert (stats.linger_requests, stats.linger_split_batches) == (1, 0)


def test_auto_async_sends_concurrent_appends_at_once_as_one_request(node):
    """Appends made in one turn of the loop with nothing in flight: one request, sent at the
    end of that turn, without a timer."""
    plain = node.client()
    plain.put_topic("lm1", durability="fsync")
    before = shard_requests(plain, "lm1")
    sizes = [1 if i % 4 else 3 for i in range(CALLERS)]

    async def run():
        async with AsyncClient(node.endpoint, linger_ms="auto") as client:
            replies = await asyncio.gather(*(
                client.append("lm1", [{"data": [i, k]} for k in range(sizes[i])])
                for i in range(CALLERS)))
            return replies, client.statistics()
    replies, stats = asyncio.run(run())
    check_own_seqs(plain, "lm1", replies, sizes)
    assert (stats.linger_appends, stats.linger_requests, stats.linger_requests_at_once) == \
        (CALLERS, 1, 1)
    assert shard_requests(plain, "lm1") - before < CALLERS


def test_auto_sends_a_lone_append_at_once(node):
    """One caller appending one record after another: each goes at once, none waits out
    the bound."""
    with node.client(linger_ms="auto") as client:
        for i in range(20):
            assert client.append("ln1", [{"data": i}])["first_seq"] == i + 1
        stats = client.statistics()
    assert (stats.linger_requests, stats.linger_requests_at_once) == (20, 20)

    async def run():
        async with AsyncClient(node.endpoint, linger_ms="auto") as client:
            seqs = [(await client.append("ln2", [{"data": i}]))["first_seq"]
                    for i in range(20)]
            return seqs, client.statistics()
    seqs, stats = asyncio.run(run())
    assert seqs == list(range(1, 21))
    assert (stats.linger_requests, stats.linger_requests_at_once) == (20, 20)


def test_auto_sync_gathers_the_appends_made_while_a_request_is_in_flight(node):
    plain = node.client()
    plain.put_topic("lo1", durability="fsync")
    sizes = [1 if i % 4 else 3 for i in range(CALLERS)]
    with node.client(linger_ms="auto") as client:
        results: list = []
        callers = threading.Thread(target=lambda: results.extend(run_threads(
            CALLERS, lambda i: client.append(
                "lo1", [{"data": [i, k]} for k in range(sizes[i])]))))
        with shard_stopped(node, "lo1"):
            callers.start()
            wait_for(lambda: client.statistics().linger_waiting == CALLERS, 20,
                     "every append to wait")
        callers.join(40)
        stats = client.statistics()
    check_own_seqs(plain, "lo1", results, sizes)
    # The first request took what waited when the sender woke; the rest went as one.
    assert 1 <= stats.linger_requests <= 2
    assert stats.linger_requests_at_once == stats.linger_requests


def test_auto_a_bad_record_fails_only_its_own_caller(node):
    plain = node.client()
    plain.put_topic("lp1")
    bad = {5, 30}

    async def run():
        async with AsyncClient(node.endpoint, linger_ms="auto") as client:
            out = await asyncio.gather(*(
                client.append("lp1", [{"data": [i, 0], "tag": "x" * (300 if i in bad else 1)}])
                for i in range(CALLERS)), return_exceptions=True)
            return out, client.statistics()
    out, stats = asyncio.run(run())
    assert stats.linger_split_batches == 1
    assert [i for i, r in enumerate(out) if isinstance(r, TopicsError)] == sorted(bad)
    assert all(out[i].code is ErrorCode.INVALID_REQUEST for i in bad)
    assert sorted(r["first_seq"] for r in out if isinstance(r, dict)) == \
        list(range(1, CALLERS - len(bad) + 1))


def test_auto_closing_answers_the_appends_waiting_behind_a_request(node):
    """Closing while a request is out and appends wait behind it: every caller answered."""
    node.client().put_topic("lq1")
    client = node.client(linger_ms="auto")
    results: list = []
    with shard_stopped(node, "lq1"):
        threads = [threading.Thread(target=lambda i=i: results.append(
            client.append("lq1", [{"data": i}]))) for i in range(8)]
        for thread in threads:
            thread.start()
        wait_for(lambda: client.statistics().linger_waiting == 8, 20, "the appends to wait")
        closing = threading.Thread(target=client.close)
        closing.start()
    closing.join(30)
    for thread in threads:
        thread.join(10)
    assert sorted(r["first_seq"] for r in results) == list(range(1, 9))

    async def run():
        aclient = AsyncClient(node.endpoint, linger_ms="auto")
        with shard_stopped(node, "lq2"):
            tasks = [asyncio.create_task(aclient.append("lq2", [{"data": i}]))
                     for i in range(8)]
            while aclient.statistics().linger_waiting < 8:
                await asyncio.sleep(0.01)
            closing = asyncio.create_task(aclient.close())
            await asyncio.sleep(0)
        await closing
        return [task.result() for task in tasks]
    node.client().put_topic("lq2")
    replies = asyncio.run(run())
    assert sorted(r["first_seq"] for r in replies) == list(range(1, 9))
