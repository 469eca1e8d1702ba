"""The gateway's commit listener lives on through a failing wake (every stream relies on
it), but not through a bug: an InvariantViolation goes to its `die` seam (in a gateway,
the process ends) instead of being logged like any other error."""

import asyncio

import pytest
import zmq
import zmq.asyncio

from topics_actors.errors import InvariantViolation
from topics_actors.gateway.commit_listener import CommitListener, Wake
from topics_actors.protocol.commit_feed import NotePage, encode_note

pytestmark = pytest.mark.timeout(30)

PAGE = NotePage(0, 1, 1, False, 1, [[1, 0, b"1", None, None, False]])


class Reads:
    def invalidate(self, topic):
        pass

    def offer(self, topic, page):
        pass


async def _feed(error: BaseException) -> tuple[list, bool, Wake]:
    """Publish notes of `t` until the listener has offered one to a taker raising `error`."""
    ctx = zmq.asyncio.Context()
    feed = ctx.socket(zmq.PUB)
    feed.setsockopt(zmq.LINGER, 0)
    feed.bind("inproc://feed")
    died, offered = [], []

    def taker(_topic, _page):
        offered.append(1)
        raise error
    listener = CommitListener(Reads(), ctx, die=died.append)
    listener.connect(["inproc://feed"])
    wake = Wake()
    listener.watch("t", wake, taker)
    deadline = asyncio.get_running_loop().time() + 10
    while not offered and asyncio.get_running_loop().time() < deadline:
        await feed.send_multipart(encode_note("t", 1, PAGE))   # a SUB joins late: resend
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    task_done = listener.task.done()
    listener.close()
    feed.close(0)
    ctx.term()
    assert offered, "no note reached the listener"
    return died, task_done, wake


def test_an_error_in_a_wake_is_logged_and_the_streams_are_woken():
    died, task_done, wake = asyncio.run(_feed(RuntimeError("a stream's bad page")))
    assert died == [] and not task_done and wake.is_set()


def test_a_bug_in_a_wake_goes_to_die():
    died, task_done, _wake = asyncio.run(_feed(InvariantViolation("advance over a tombstone")))
    assert [type(bug) for bug in died] == [InvariantViolation] and task_done
