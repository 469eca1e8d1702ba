"""Reading the routers' sources: the shell's part of shard/routers/router_book.py.

Once per loop turn, never blocking: replies that came in become RouterPass requests for the
core, and every router of this shard with no read in flight gets one, a long-polling diff of
its source from the router's cursor. The source's shard parks the read until the source
publishes, so a quiet router costs one parked read and no polling. How a read travels:

- a source in another shard: over a lane to that shard (shard/lane_links.py), a Unix
  socket this loop writes and reads itself; a lane that closes (that shard restarted)
  ends its reads at once, and they are sent again after RETRY_MS;
- a source in this shard: in-process, with no socket. The diff goes straight into this
  shard's core (`submit_own`) and its answer comes back through `answered`; the shell
  commits the pass it makes in the loop turn of the source's write (shard_server.py), so
  the copies are visible before the shard reads its next request.

A read that gets no answer within its wait plus TIMEOUT_MS, or an error, is sent again
after RETRY_MS; so is a page whose pass did not move the cursor (destination full, inbox
throttled). Nothing here needs to survive a crash: the cursor the next read starts from is
in the WAL.
"""

from __future__ import annotations

import logging
import time

import zmq

from topics_actors.protocol import encode
from topics_actors.protocol.messages import Diff
from topics_actors.shard.lane_links import LaneLinks
from topics_actors.shard.peer_sockets import decode_answer
from topics_actors.shard.routers.router_book import RouterBook, RouterPass
from topics_actors.topic_identity import shard_of_name

log = logging.getLogger(__name__)

WAIT_MS = 1_000           # how long a source shard parks a caught-up read
TIMEOUT_MS = 5_000        # beyond the wait: the source shard is gone or stuck
RETRY_MS = 200
PAGE_RECORDS = 1_000      # records per read (the diff maximum)
FAST_EMPTY_S = 0.2        # an empty answer sooner than this was not parked: back off


class RouterFeed:
    def __init__(self, book: RouterBook, poller: zmq.Poller, run_dir: str,
                 shard: int, shard_count: int, submit, submit_own):
        """`submit(msg)` hands a RouterPass to the core (staged in the current batch);
        `submit_own(msg, corr)` a read of a source in this shard (`shard`), whose answer
        the shell hands to `answered`; the other shards' lanes are in `run_dir`."""
        self.book = book
        self.lanes = LaneLinks(run_dir, poller, self._lost)
        self.shard = shard
        self.shard_count = shard_count
        self.submit = submit
        self.submit_own = submit_own
        # corr -> router, its read's from, sent at, the source's shard
        self.in_flight: dict[int, tuple[str, int, float, int]] = {}
        self.busy: set[str] = set()
        self.not_before: dict[str, float] = {}
        self.last_from: dict[str, int] = {}     # router -> cursor of its last answered page
        self.corr = 0
        self.sent = self.failed = 0

    def pump(self, ready: list) -> None:
        """`ready`: what the loop's poll found (the lanes' part is taken here)."""
        now = time.monotonic()
        if self.lanes.links:
            self.lanes.ready(ready, lambda raw: self._reply(raw, now))
        feeds = self.book.feeds()
        if not feeds and not self.in_flight:
            return
        # A page received above was staged at once (a RouterPass moves its router's cursor
        # when staged), so the router's next read goes out below, from the moved cursor;
        # a page that did not apply left the cursor where it was: that router waits.
        for corr, (name, _from, sent_at, _shard) in list(self.in_flight.items()):
            if now - sent_at > (WAIT_MS + TIMEOUT_MS) / 1000:
                del self.in_flight[corr]
                self.busy.discard(name)
        if len(self.not_before) + len(self.last_from) > 2 * len(feeds) + 64:
            live = {name for name, _, _ in feeds}     # forget deleted routers
            self.not_before = {n: t for n, t in self.not_before.items() if n in live}
            self.last_from = {n: c for n, c in self.last_from.items() if n in live}
        for name, source, cursor in feeds:
            if name in self.busy or self.not_before.get(name, 0) > now:
                continue
            if self.last_from.pop(name, None) == cursor:   # the last page did not apply
                self.not_before[name] = now + RETRY_MS / 1000
                continue
            self._send(name, source, cursor, now)

    def ms_until_due(self) -> float | None:
        """How soon a read is due (0: now), for the shell's poll timeout; None: none."""
        now, due = time.monotonic(), None
        for name, _source, _cursor in self.book.feeds():
            if name not in self.busy:
                wait = max(0.0, (self.not_before.get(name, 0) - now) * 1000)
                due = wait if due is None else min(due, wait)
        return due

    def _send(self, name: str, source: str, cursor: int, now: float) -> None:
        self.corr += 1
        msg = Diff(source, cursor, PAGE_RECORDS, include_tags=True, wait_ms=WAIT_MS,
                   include_hops=True)
        shard = shard_of_name(source, self.shard_count)
        if shard == self.shard:
            self.submit_own(msg, self.corr)
        elif not self.lanes.send(shard, encode(msg, self.corr)):
            self.not_before[name] = now + RETRY_MS / 1000
            return
        self.in_flight[self.corr] = (name, cursor, now, shard)
        self.busy.add(name)
        self.sent += 1

    def answered(self, raw: bytes) -> None:
        """The answer to a read of a source in this shard (submit_own)."""
        self._reply(raw, time.monotonic())

    def _reply(self, raw: bytes, now: float) -> None:
        corr, reply, error = decode_answer(raw)
        entry = self.in_flight.pop(corr, None)
        if entry is None:
            return    # answered after its timeout: a newer read decides
        name, from_seq, sent_at, _shard = entry
        self.busy.discard(name)
        if error is not None:
            self.failed += 1
            self.not_before[name] = now + RETRY_MS / 1000
            log.debug("event=router_read_failed router=%s code=%s", name, error.code.wire)
            return
        if reply["next_from_seq"] == from_seq:
            if now - sent_at < FAST_EMPTY_S:   # not parked (the source's parks are full)
                self.not_before[name] = now + RETRY_MS / 1000
            return
        self.last_from[name] = from_seq
        self.submit(RouterPass(name, from_seq, reply))

    def _lost(self, shard: int) -> None:
        """The lane to `shard` closed: its reads end now, and go again after RETRY_MS."""
        retry_at = time.monotonic() + RETRY_MS / 1000
        for corr, (name, _from, _sent, at) in list(self.in_flight.items()):
            if at == shard:
                del self.in_flight[corr]
                self.busy.discard(name)
                self.not_before[name] = retry_at

    def close(self) -> None:
        self.lanes.close()
