"""The adaptive linger (linger_ms "auto") of both clients' shells, against a fake shard
whose answers the test releases one request at a time.

Goal: a batch goes at once while its topic has room in flight (AsyncClient: at the end of
the loop's turn, so appends made in the same turn, such as the callers one reply woke,
join it); appends made while the room is taken gather and go as one request when a request
of their topic is answered, when the bound (linger_ms) passes, or when the batch is full;
the fixed linger is unchanged; each caller gets its own seqs; close answers every caller.

Method: async_linger.AsyncLinger and linger_sender.LingerSender driven with a fake client
whose `request` records the Append and waits until the test answers it; what went out
when is read from the fake's list of requests and from statistics(), never from timing.
"""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

from topics_actors.client.linger_batcher import LingerOptions
from topics_actors.client.async_linger import AsyncLinger
from topics_actors.client.linger_sender import LingerSender
from tests.support import wait_for

pytestmark = pytest.mark.timeout(30)

NEVER_MS = 1_000        # a bound no test waits for


def auto(**options) -> LingerOptions:
    return LingerOptions(options.pop("linger_ms", NEVER_MS), adaptive=True, **options)


class FakeShard:
    """Assigns seqs per topic and answers request i once the test released it."""

    def __init__(self):
        self.requests: list = []
        self.heads: dict[str, int] = {}
        self._keys = itertools.count(1)

    def session_key(self) -> str:
        return f"~s:{next(self._keys)}"

    def reply(self, msg) -> dict:
        first = self.heads.get(msg.topic, 0) + 1
        last = self.heads[msg.topic] = first + len(msg.records) - 1
        return {"topic": msg.topic, "first_seq": first, "last_seq": last, "head_seq": last,
                "count": len(msg.records), "created": False, "deduped": False}

    def sizes(self) -> list[int]:
        return [len(msg.records) for msg in self.requests]


class AsyncFakeShard(FakeShard):
    def __init__(self):
        super().__init__()
        self.answers: list[asyncio.Future] = []

    async def request(self, topic: str, msg) -> dict:
        self.requests.append(msg)
        answer = asyncio.get_running_loop().create_future()
        self.answers.append(answer)
        await answer
        return self.reply(msg)

    def release(self, index: int) -> None:
        self.answers[index].set_result(None)


async def turns(count: int = 5) -> None:
    """Let the loop run `count` turns (what was scheduled for the end of a turn runs)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def until(condition, what: str) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


def appends(linger: AsyncLinger, topic: str, first: int, count: int) -> list[asyncio.Task]:
    return [asyncio.create_task(linger.append(topic, [{"data": i}], {}))
            for i in range(first, first + count)]


def test_async_sends_at_once_when_idle_and_gathers_while_in_flight():
    async def run():
        shard = AsyncFakeShard()
        linger = AsyncLinger(shard.request, shard.session_key, auto())
        first = appends(linger, "t", 0, 40)          # one turn: one request of 40
        await turns()
        assert shard.sizes() == [40]
        later = appends(linger, "t", 40, 10)         # room taken: they gather
        await turns()
        assert shard.sizes() == [40] and linger.statistics().linger_waiting == 50
        shard.release(0)
        await turns()
        assert shard.sizes() == [40, 10]             # sent when the first is answered
        shard.release(1)
        replies = await asyncio.gather(*first, *later)
        assert [r["first_seq"] for r in replies] == list(range(1, 51))
        stats = linger.statistics()
        assert (stats.linger_requests, stats.linger_requests_at_once) == (2, 2)
        assert stats.linger_waiting == 0
    asyncio.run(run())


def test_async_callers_woken_by_one_reply_append_again_in_one_request():
    """Closed-loop producers: each round's appends travel together, with no timer."""
    async def producer(linger, ident, rounds, seqs):
        for _ in range(rounds):
            seqs[ident].append((await linger.append("t", [{"data": ident}], {}))["first_seq"])

    async def run():
        shard = AsyncFakeShard()
        linger = AsyncLinger(shard.request, shard.session_key, auto())
        seqs: dict[int, list] = {i: [] for i in range(8)}
        tasks = [asyncio.create_task(producer(linger, i, 3, seqs)) for i in range(8)]
        for round_ in range(3):
            await until(lambda: len(shard.requests) == round_ + 1, "the round's request")
            assert shard.sizes()[-1] == 8
            shard.release(round_)
        await asyncio.gather(*tasks)
        assert shard.sizes() == [8, 8, 8]
        assert sorted(s for own in seqs.values() for s in own) == list(range(1, 25))
        assert all(own == sorted(own) for own in seqs.values())     # in order per caller
    asyncio.run(run())


def test_async_two_in_flight_then_gather():
    async def run():
        shard = AsyncFakeShard()
        linger = AsyncLinger(shard.request, shard.session_key, auto(in_flight_max=2))
        tasks = appends(linger, "t", 0, 1)
        await turns()
        tasks += appends(linger, "t", 1, 2)
        await turns()
        tasks += appends(linger, "t", 3, 3)
        await turns()
        assert shard.sizes() == [1, 2]
        tasks += appends(linger, "u", 0, 1)          # another topic has its own room
        await turns()
        assert shard.sizes() == [1, 2, 1]
        shard.release(1)
        await turns()
        assert shard.sizes() == [1, 2, 1, 3]
        for index in (0, 2, 3):
            shard.release(index)
        await asyncio.gather(*tasks)
    asyncio.run(run())


def test_async_a_batch_goes_on_the_bound_or_when_full_without_room():
    async def run():
        shard = AsyncFakeShard()
        linger = AsyncLinger(shard.request, shard.session_key,
                             auto(linger_ms=1, batch_records_max=3))
        tasks = appends(linger, "t", 0, 1)
        await turns()
        tasks += appends(linger, "t", 1, 3)          # full: goes without room
        await turns()
        assert shard.sizes() == [1, 3]
        tasks += appends(linger, "t", 4, 1)          # waits out the bound
        await until(lambda: len(shard.requests) == 3, "the bound to pass")
        assert linger.statistics().linger_requests_at_once == 1
        for index in range(3):
            shard.release(index)
        await asyncio.gather(*tasks)
    asyncio.run(run())


def test_async_fixed_linger_never_sends_at_once():
    async def run():
        shard = AsyncFakeShard()
        linger = AsyncLinger(shard.request, shard.session_key, LingerOptions(1))
        tasks = appends(linger, "t", 0, 2)
        await turns()
        assert shard.sizes() == []
        await until(lambda: shard.sizes() == [2], "linger_ms to pass")
        shard.release(0)
        await asyncio.gather(*tasks)
        assert linger.statistics().linger_requests_at_once == 0
    asyncio.run(run())


def test_async_close_sends_what_gathers_and_answers_every_caller():
    async def run():
        shard = AsyncFakeShard()
        linger = AsyncLinger(shard.request, shard.session_key, auto())
        tasks = appends(linger, "t", 0, 1)
        await turns()
        tasks += appends(linger, "t", 1, 5)
        await turns()
        closing = asyncio.create_task(linger.close())
        await turns()
        assert shard.sizes() == [1, 5] and not closing.done()
        shard.release(0)
        shard.release(1)
        await closing
        assert sorted(t.result()["first_seq"] for t in tasks) == list(range(1, 7))
    asyncio.run(run())


class BlockingFakeShard(FakeShard):
    """The sync sender's client: `request` blocks until the test releases it."""
    retry_deadline_ms = 5_000
    request_timeout_ms = 1_000

    def __init__(self):
        super().__init__()
        self.cond = threading.Condition()
        self.released = 0

    def request(self, topic: str, msg) -> dict:
        with self.cond:
            self.requests.append(msg)
            index = len(self.requests) - 1
            assert self.cond.wait_for(lambda: self.released > index, 20)
            return self.reply(msg)

    def release(self) -> None:
        with self.cond:
            self.released += 1
            self.cond.notify_all()

    def close(self) -> None:
        pass


def test_sync_sends_at_once_when_idle_and_gathers_while_in_flight():
    shard = BlockingFakeShard()
    sender = LingerSender(shard.request, shard.session_key, auto(), shard.retry_deadline_ms,
                          shard.request_timeout_ms, shard.close)
    results: dict[int, dict] = {}

    def append(i):
        results[i] = sender.append("t", [{"data": i}], {})
    first = threading.Thread(target=append, args=(0,))
    first.start()
    wait_for(lambda: shard.sizes() == [1], 10, "the first append to go at once")
    threads = [threading.Thread(target=append, args=(i,)) for i in range(1, 11)]
    for thread in threads:
        thread.start()
    wait_for(lambda: sender.statistics().linger_waiting == 11, 10, "the appends to gather")
    assert shard.sizes() == [1]
    shard.release()
    wait_for(lambda: shard.sizes() == [1, 10], 10, "the gathered batch")
    shard.release()
    for thread in [first, *threads]:
        thread.join(10)
    assert sorted(r["first_seq"] for r in results.values()) == list(range(1, 12))
    stats = sender.statistics()
    assert (stats.linger_requests, stats.linger_requests_at_once) == (2, 2)
    sender.close()
