"""The gateway's commit listener (gateway/commit_listener.py, feed_connection.py) against a
feed socket served by the test: it subscribes to what its streams watch, again after every
reconnect, wakes every stream when a connection comes up, and lives on through a failing
wake (every stream relies on it), but not through a bug: an InvariantViolation goes to its
`die` seam (in a gateway, the process ends) instead of being logged like any other error."""

import asyncio

import pytest

from topics_actors.errors import InvariantViolation
from topics_actors.gateway.commit_listener import CommitListener, Wake
from topics_actors.protocol.commit_feed import NotePage, decode_subscription, encode_note
from topics_actors.protocol.lane import FrameReader, frame

pytestmark = pytest.mark.timeout(30)

PAGE = NotePage(0, 1, 1, False, 1, [[1, 0, b"1", None, None, False]])


class Reads:
    def invalidate(self, topic):
        pass

    def offer(self, topic, page):
        pass


class Shard:
    """A feed socket: the subscriptions each connection wrote, and a way to write notes."""

    def __init__(self):
        self.conns: list[tuple[asyncio.StreamWriter, list]] = []
        self.joined = asyncio.Event()

    async def serve(self, path: str) -> asyncio.AbstractServer:
        async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
            changes, frames = [], FrameReader()
            self.conns.append((writer, changes))
            self.joined.set()
            while data := await reader.read(65536):
                changes += [decode_subscription(raw) for raw in frames.feed(data)]
        return await asyncio.start_unix_server(conn, path)

    async def close(self, server: asyncio.AbstractServer) -> None:
        for writer, _ in self.conns:
            writer.close()
        server.close()
        await server.wait_closed()

    def note(self, *args) -> None:
        self.conns[-1][0].write(frame(encode_note(*args)))


async def until(predicate, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.01)


async def _fail_a_wake(path: str, error: BaseException) -> tuple[list, Wake]:
    shard, died, offered = Shard(), [], []
    server = await shard.serve(path)

    def taker(_topic, _page):
        offered.append(1)
        raise error
    listener = CommitListener(Reads(), die=died.append)
    wake = Wake()
    listener.watch("t", wake, taker)
    listener.connect([path])
    await until(lambda: shard.conns and shard.conns[-1][1], "no subscription arrived")
    wake.clear()
    shard.note("t", 1, PAGE)
    await until(lambda: offered, "no note reached the listener")
    listener.close()
    await shard.close(server)
    return died, wake


def test_an_error_in_a_wake_is_logged_and_the_streams_are_woken(tmp_path):
    died, wake = asyncio.run(_fail_a_wake(str(tmp_path / "f"), RuntimeError("a bad page")))
    assert died == [] and wake.is_set()


def test_a_bug_in_a_wake_goes_to_die(tmp_path):
    died, _wake = asyncio.run(_fail_a_wake(str(tmp_path / "f"),
                                           InvariantViolation("advance over a tombstone")))
    assert [type(bug) for bug in died] == [InvariantViolation]


async def _reconnect(path: str) -> None:
    shard = Shard()
    listener = CommitListener(Reads())
    listener.connect([path])             # the shard is not up yet: the listener retries
    a, b = Wake(), Wake()
    listener.watch("a", a)
    server = await shard.serve(path)
    await until(lambda: shard.conns and shard.conns[-1][1], "no subscription arrived")
    assert shard.conns[-1][1] == [(True, ["a"])]
    listener.watch("b", b)
    listener.unwatch("a", a)
    await until(lambda: len(shard.conns[-1][1]) == 3, "changes did not arrive")
    assert shard.conns[-1][1][1:] == [(True, ["b"]), (False, ["a"])]
    b.clear()
    shard.note("b", 4)
    await until(b.is_set, "the note did not wake b")
    b.clear()
    shard.conns[-1][0].close()           # the shard restarts: the listener comes back,
    server.close()                       # subscribes to what it watches, and wakes it
    await server.wait_closed()
    server = await shard.serve(path)
    await until(lambda: len(shard.conns) == 2 and shard.conns[-1][1], "no resubscription")
    assert shard.conns[-1][1] == [(True, ["b"])]
    await until(b.is_set, "b was not woken by the reconnect")
    listener.close()
    await shard.close(server)


def test_the_listener_resubscribes_and_wakes_its_streams_after_a_reconnect(tmp_path):
    asyncio.run(_reconnect(str(tmp_path / "f")))
