"""The sender thread of a lingering Client (issue 18; the rules: append_linger.py).

Appends from any thread wait in one bounded queue (a caller finding it full waits for
room). The thread takes what waits once the oldest append has waited linger_ms (or at once
when a batch is full, or the client is closing), groups it into batches per topic, sends
each batch through a Client of its own (its own sockets: a ZeroMQ socket is used by this
thread only) and answers every caller. One request is in flight at a time; appends that
arrive meanwhile gather for the next round. Adaptive (linger_ms "auto"): the thread takes
what waits as soon as it is free, without waiting out linger_ms, so an append made while
nothing is in flight goes at once and the ones made during a request go when it is answered
(one request in flight per client: in_flight_max is the AsyncClient's).

close() stops taking appends and waits for the thread: it sends what was already waiting
(a flush) and answers each caller; what is still unsent retry_deadline_ms after the close
began is answered with an error instead of being sent.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from topics_actors.client.append_linger import (
    ClientStatistics, LingerOptions, OpenBatch, Pending, batch_key, own_error, pending_of,
    splits_on,
)
from topics_actors.client.retry_budget import unavailable
from topics_actors.errors import ErrorCode, TopicsError

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0          # the longest any wait here lasts before it looks again


def closed_error() -> TopicsError:
    return TopicsError("the client is closed", ErrorCode.INVALID_REQUEST)


class _Slot:
    """Where the sender thread leaves one caller's answer."""
    __slots__ = ("done", "reply", "error")

    def __init__(self):
        self.done = threading.Event()
        self.reply: dict | None = None
        self.error: BaseException | None = None


def _answer(pending: Pending, reply: dict | None, error: BaseException | None) -> None:
    slot = pending.slot
    slot.reply, slot.error = reply, None if error is None else own_error(error)
    slot.done.set()


class LingerSender:
    def __init__(self, client, limits: LingerOptions):
        """`client`: a Client without linger, used by the sender thread alone (closed by
        it when the thread ends)."""
        self._client = client
        self._limits = limits
        self._linger_s = limits.linger_ms / 1000
        self._cond = threading.Condition()
        self._waiting: collections.deque = collections.deque()  # (t, topic, key, pending)
        self._filling: dict[tuple, OpenBatch] = {}     # sizes of the waiting batches
        self._full = False
        self._closing = False
        self._close_deadline = 0.0
        self._appends = self._requests = self._splits = self._in_flight = 0
        self._at_once = 0
        self._thread = threading.Thread(target=self._run, name="topics-client-linger",
                                        daemon=True)
        self._thread.start()

    # --- callers (any thread) ---------------------------------------------------------------

    def append(self, topic: str, records: list, options: dict) -> dict:
        """Append as Client.append does (any thread): wait for the batch's answer."""
        key = batch_key(options)
        pending = pending_of(records, options, key, self._limits)   # its errors: raised here
        slot = pending.slot = _Slot()
        with self._cond:
            while len(self._waiting) >= self._limits.waiting_max and not self._closing:
                self._cond.wait(IDLE_WAIT_S)
            if self._closing:
                raise closed_error()
            self._waiting.append((time.monotonic(), topic, key, pending))
            self._appends += 1
            if not pending.alone:
                self._note_size(topic, key, pending)
            if len(self._waiting) == 1 or self._full:
                self._cond.notify_all()
        while not slot.done.wait(IDLE_WAIT_S):
            if not self._thread.is_alive() and not slot.done.is_set():
                raise TopicsError("the client's linger thread stopped", ErrorCode.INTERNAL)
        if slot.error is not None:
            raise slot.error
        return slot.reply

    def _note_size(self, topic: str, key: tuple, pending: Pending) -> None:
        """Track the waiting batches' sizes: a full one is sent without waiting linger_ms."""
        batch = self._filling.get((topic, key))
        if batch is None or not batch.fits(pending, self._limits):
            self._full = self._full or batch is not None
            batch = self._filling[(topic, key)] = OpenBatch(topic, key[0])
        batch.records += len(pending.records)
        batch.bytes += pending.bytes
        self._full = self._full or batch.full(self._limits)

    def statistics(self) -> ClientStatistics:
        with self._cond:
            return ClientStatistics(self._appends, self._requests, self._splits,
                                    len(self._waiting) + self._in_flight, self._at_once)

    def close(self) -> None:
        with self._cond:
            if not self._closing:
                self._closing = True
                self._close_deadline = (time.monotonic()
                                        + self._client.retry_deadline_ms / 1000)
                self._cond.notify_all()
        limit_s = (2 * self._client.retry_deadline_ms + self._client.request_timeout_ms) / 1000
        self._thread.join(limit_s + 5)
        if self._thread.is_alive():
            log.error("event=linger_thread_stuck waited_s=%.1f", limit_s + 5)

    # --- the sender thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while (batches := self._take()) is not None:
                for batch in batches:
                    self._at_once += self._limits.adaptive
                    self._send(batch)
                with self._cond:
                    self._in_flight = 0
        finally:
            self._client.close()

    def _take(self) -> list[OpenBatch] | None:
        """What waits, as batches, once it is due; None when closing with nothing left."""
        with self._cond:
            while not self._waiting:
                if self._closing:
                    return None
                self._cond.wait(IDLE_WAIT_S)
            due = self._waiting[0][0] + self._linger_s
            while (not self._limits.adaptive and not self._full and not self._closing
                   and (left_s := due - time.monotonic()) > 0):
                self._cond.wait(left_s)
            taken, self._waiting = self._waiting, collections.deque()
            self._filling.clear()
            self._full = False
            self._in_flight = len(taken)
            self._cond.notify_all()          # room for callers waiting on a full queue
        return self._batches(taken)

    def _batches(self, taken) -> list[OpenBatch]:
        batches: list[OpenBatch] = []
        filling: dict[tuple, OpenBatch] = {}
        for _, topic, key, pending in taken:
            if pending.alone:
                batches.append(OpenBatch.of_one(topic, pending, None))
                continue
            batch = filling.get((topic, key))
            if batch is None or not batch.fits(pending, self._limits):
                batch = filling[(topic, key)] = OpenBatch(topic, key[0])
                batches.append(batch)
            batch.add(pending)
        return batches

    def _send(self, batch: OpenBatch) -> None:
        if self._closing and time.monotonic() > self._close_deadline:
            error = unavailable(f"an append to {batch.topic!r} (the client closed before "
                                f"it was sent)")
            for pending in batch.pendings:
                _answer(pending, None, error)
            return
        self._requests += 1
        try:
            reply = self._client._request(batch.topic,
                                          batch.message(self._client._session_key()))
        except TopicsError as error:
            if splits_on(batch, error):
                self._splits += 1
                for pending in batch.pendings:
                    self._send(OpenBatch.of_one(batch.topic, pending, batch.create))
                return
            for pending in batch.pendings:
                _answer(pending, None, error)
        except Exception as error:  # noqa: BLE001 - raised in every caller's thread instead
            for pending in batch.pendings:
                _answer(pending, None, error)
        else:
            for pending, own in zip(batch.pendings, batch.replies(reply)):
                _answer(pending, own, None)
