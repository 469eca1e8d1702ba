"""The linger batcher on a thread: the sender of a lingering Client (the rules:
linger_batcher.py).

Appends from any thread join their lanes (at most `waiting_max` wait; a caller finding no
room waits for it). The thread takes everything that waits once the oldest append has
waited linger_ms (or at once when a batch is full, or the client is closing), sends each
batch through a Client of its own (its own sockets: a ZeroMQ socket is used by this thread
only) and answers every caller. One request is in flight at a time; appends that arrive
meanwhile gather for the next round. Adaptive (linger_ms "auto"): the thread takes what
waits as soon as it is free, without waiting out linger_ms, so an append made while nothing
is in flight goes at once and the ones made during a request go when it is answered (one
request in flight per client: in_flight_max is the AsyncClient's).

close() stops taking appends and waits for the thread: it sends what was already waiting
(a flush) and answers each caller; what is still unsent retry_deadline_ms after the close
began is answered with an error instead of being sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from topics_actors.client.linger_batcher import (
    Batch, ClientStatistics, LingerBatcher, LingerOptions, Pending, batch_key, closed_error,
    own_error, pending_of,
)
from topics_actors.client.retry_budget import unavailable
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import Append

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0          # the longest any wait here lasts before it looks again


class _Slot:
    """Where the sender thread leaves one caller's answer."""
    __slots__ = ("done", "reply", "error")

    def __init__(self):
        self.done = threading.Event()
        self.reply: dict | None = None
        self.error: BaseException | None = None


def _answer(pending: Pending, reply: dict | None, error: BaseException | None) -> None:
    slot = pending.slot
    slot.reply, slot.error = reply, error
    slot.done.set()


class LingerSender:
    def __init__(self, send: Callable[[str, Append], dict], session_key: Callable[[], str],
                 options: LingerOptions, retry_deadline_ms: int, request_timeout_ms: int,
                 on_stop: Callable[[], None]):
        """`send(topic, msg)`: a request with its retries, made by the sender thread only
        (a Client without linger, closed by `on_stop` when the thread ends)."""
        self._send = send
        self._session_key = session_key
        self._options = options
        self._retry_deadline_ms = retry_deadline_ms
        self._request_timeout_ms = request_timeout_ms
        self._on_stop = on_stop
        self._linger_s = options.linger_ms / 1000
        self._cond = threading.Condition()
        self._batcher = LingerBatcher(options)
        self._waiting = 0               # appends in the lanes, not taken yet
        self._full = False
        self._closing = False
        self._close_deadline = 0.0
        self._thread = threading.Thread(target=self._run, name="topics-client-linger",
                                        daemon=True)
        self._thread.start()

    # --- callers (any thread) ---------------------------------------------------------------

    def append(self, topic: str, records: list, options: dict) -> dict:
        """Append as Client.append does (any thread): wait for the batch's answer."""
        key = batch_key(options)
        pending = pending_of(topic, records, options, key, self._options, self._session_key)
        slot = pending.slot = _Slot()
        with self._cond:
            while self._waiting >= self._options.waiting_max and not self._closing:
                self._cond.wait(IDLE_WAIT_S)
            if self._closing:
                raise closed_error()
            pending.since_s = time.monotonic()
            batcher = self._batcher
            lane = (batcher.alone_lane(topic) if pending.message is not None
                    else batcher.lane((topic, key), topic, key[0]))
            batcher.add(lane, pending)
            self._waiting += 1
            self._full = self._full or batcher.full(lane)
            if self._waiting == 1 or self._full:
                self._cond.notify_all()
        while not slot.done.wait(IDLE_WAIT_S):
            if not self._thread.is_alive() and not slot.done.is_set():
                raise TopicsError("the client's linger thread stopped", ErrorCode.INTERNAL)
        if slot.error is not None:
            raise slot.error
        return slot.reply

    def statistics(self) -> ClientStatistics:
        with self._cond:
            return self._batcher.statistics()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        with self._cond:
            if not self._closing:
                self._closing = True
                self._close_deadline = time.monotonic() + self._retry_deadline_ms / 1000
                self._cond.notify_all()
        limit_s = (2 * self._retry_deadline_ms + self._request_timeout_ms) / 1000
        self._thread.join(limit_s + 5)
        if self._thread.is_alive():
            log.error("event=linger_thread_stuck waited_s=%.1f", limit_s + 5)

    # --- the sender thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while (batches := self._take()) is not None:
                for batch in batches:
                    self._deliver(batch)
                    with self._cond:
                        self._batcher.answered(batch.lane, batch)
        finally:
            self._on_stop()

    def _take(self) -> list[Batch] | None:
        """What waits, as batches, once it is due; None when closing with nothing left."""
        with self._cond:
            while not self._waiting:
                if self._closing:
                    return None
                self._cond.wait(IDLE_WAIT_S)
            due = self._batcher.oldest_s() + self._linger_s
            while (not self._options.adaptive and not self._full and not self._closing
                   and (left_s := due - time.monotonic()) > 0):
                self._cond.wait(left_s)
            batches = self._batcher.take_all()
            self._batcher.at_once += len(batches) if self._options.adaptive else 0
            self._waiting = 0
            self._full = False
            self._cond.notify_all()          # room for callers waiting on a full queue
        return batches

    def _deliver(self, batch: Batch) -> None:
        if self._closing and time.monotonic() > self._close_deadline:
            error = unavailable(f"an append to {batch.lane.topic!r} (the client closed "
                                f"before it was sent)")
            self._fail(batch, error)
            return
        try:
            reply = self._send(batch.lane.topic, batch.message(self._session_key))
        except TopicsError as error:
            if batch.splits_on(error):
                with self._cond:
                    singles = self._batcher.split(batch)
                for one in singles:
                    self._deliver(one)
                return
            self._fail(batch, error)
        except Exception as error:  # noqa: BLE001 - raised in every caller's thread instead
            self._fail(batch, error)
        else:
            for pending, own in zip(batch.pendings, batch.replies(reply)):
                _answer(pending, own, None)

    @staticmethod
    def _fail(batch: Batch, error: BaseException) -> None:
        shared = len(batch.pendings) > 1
        for pending in batch.pendings:
            _answer(pending, None, own_error(error) if shared else error)
