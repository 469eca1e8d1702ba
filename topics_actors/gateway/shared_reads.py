"""Reads of watched topics shared by every watch stream of this gateway process.

Streams woken by the same commit and sitting at the same cursor with the same read
options ask for the same page: the first asks the shard (one `diff`), renders the records
once, and every other stream awaits that same result, so a record is serialized once per
(topic, seq range, options) and the bytes are shared by all its watchers (only the
per-connection `id:` line differs). A page is a PageRead whose `records` is the `record`
frame's data line (None when no record passed). Finished pages stay reusable until the
topic's next commit notification (`invalidate`), since until then a read at the same cursor
would return the same page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from topics_actors.gateway.diff_page import render_records
from topics_actors.gateway.engine_link import EngineLink
from topics_actors.gateway.sse_frame import record_data
from topics_actors.limits import (
    DIFF_BATCH_BYTES_DEFAULT, DIFF_BATCH_BYTES_MAX, DIFF_LIMIT_DEFAULT, DIFF_LIMIT_MAX, clamp,
)
from topics_actors.protocol.commit_feed import NotePage
from topics_actors.protocol.messages import Diff
from topics_actors.record_envelope import meta_flag_of, payload_bytes
from topics_actors.watch_cursor import PageRead

PAGES_PER_TOPIC_MAX = 64     # distinct (cursor, options) pages kept per topic


@dataclasses.dataclass(frozen=True)
class ReadView:
    """A session's read options, hashable (a page is shared only between equal views)."""
    node: object            # None, a node name, or a tuple of names
    limit: int
    max_batch_bytes: int
    include_meta: bool
    include_tags: bool
    include_data: bool

    @classmethod
    def from_options(cls, options: dict) -> "ReadView":
        node = options.get("node")
        return cls(tuple(node) if isinstance(node, list) else node, options["limit"],
                   options["max_batch_bytes"], options["include_meta"],
                   options["include_tags"], options["include_data"])


def _page_for(topic: str, offer: NotePage, view: ReadView) -> PageRead | None:
    """The page a diff from the offer's start with the view's options reads, if the offer
    holds all of it: what the view's `node` filters out is left out (a diff skips those
    records and counts neither them nor their bytes), and the rest must fit the view's
    limit and byte budget (a diff always takes one record). None: read from the shard."""
    records = offer.records
    if view.node is not None and offer.node_filter:
        nodes = {view.node} if isinstance(view.node, str) else set(view.node)
        records = [record for record in records if record[4] not in nodes]
    if len(records) > clamp(view.limit or DIFF_LIMIT_DEFAULT, 1, DIFF_LIMIT_MAX):
        return None
    budget = clamp(view.max_batch_bytes or DIFF_BATCH_BYTES_DEFAULT, 1, DIFF_BATCH_BYTES_MAX)
    if len(records) > 1 and budget < (offer.bytes if records is offer.records else sum(
            payload_bytes(len(r[2]), meta_flag_of(r[5])) for r in records)):
        return None
    data = None
    if records:
        data = record_data(topic, offer.from_seq, offer.head_seq, offer.head_seq,
                           render_records(records, view.include_meta, view.include_data,
                                          view.include_tags))
    return PageRead(offer.head_seq, offer.head_seq, True, None, data)


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()    # a failure reaches every awaiting stream; never "unretrieved"


class SharedReads:
    def __init__(self, engine: EngineLink):
        self.engine = engine
        self.pages: dict[str, dict[tuple, asyncio.Future]] = {}
        self.offers: dict[str, NotePage] = {}     # the latest notification's page per topic
        # Frames made from a page, by the reading stream's state before (watch_stream.py):
        # topic -> {(id of the page read, state): (page read, frames)}.
        self._frames: dict[str, dict[tuple, tuple]] = {}
        self.fetched = 0
        self.shared = 0
        self.offered_pages = 0

    async def page(self, topic: str, from_seq: int, view: ReadView) -> PageRead:
        pages = self.pages.setdefault(topic, {})
        key = (from_seq, view)
        task = pages.get(key)
        if task is not None and not (task.done() and (task.cancelled() or task.exception())):
            self.shared += 1
            return await asyncio.shield(task)
        ready = self.offered(topic, from_seq, view)
        if ready is not None:
            return ready
        if len(pages) >= PAGES_PER_TOPIC_MAX:
            pages.clear()
        task = pages[key] = asyncio.ensure_future(self._fetch(topic, from_seq, view))
        task.add_done_callback(_retrieve)
        task.started_s = time.monotonic()
        self.fetched += 1
        return await asyncio.shield(task)

    def offered(self, topic: str, from_seq: int, view: ReadView) -> PageRead | None:
        """The page from the topic's last notification, when it is what a read at
        `from_seq` with `view` would get (kept with the shared pages); else None."""
        offer = self.offers.get(topic)
        if offer is None or offer.from_seq != from_seq:
            return None
        pages, key = self.pages.setdefault(topic, {}), (from_seq, view)
        done = pages.get(key)
        if done is not None and done.done() and not done.cancelled() and \
                done.exception() is None:
            return done.result()
        read = _page_for(topic, offer, view)
        if read is None:
            return None
        if len(pages) >= PAGES_PER_TOPIC_MAX:
            pages.clear()
        future = pages[key] = asyncio.get_running_loop().create_future()
        future.set_result(read)
        future.started_s = time.monotonic()
        self.offered_pages += 1
        return read

    def offer(self, topic: str, page: NotePage) -> None:
        """A commit notification's page: watchers at its `from_seq` read it from here."""
        self.offers[topic] = page

    def frames(self, topic: str, read: PageRead, state: tuple) -> bytes | None:
        """The frames a stream in `state` made of `read`, if one did since the topic's
        last commit."""
        kept = self._frames.get(topic, {}).get((id(read), state))
        return None if kept is None else kept[1]

    def keep_frames(self, topic: str, read: PageRead, state: tuple, frames: bytes) -> None:
        kept = self._frames.setdefault(topic, {})
        if len(kept) >= PAGES_PER_TOPIC_MAX:
            kept.clear()
        kept[(id(read), state)] = (read, frames)    # the read held: its id stays its own

    def invalidate(self, topic: str) -> None:
        """The topic committed: pages read before may be behind its head."""
        self.pages.pop(topic, None)
        self.offers.pop(topic, None)
        self._frames.pop(topic, None)

    def refresh(self, topic: str, max_age_s: float) -> None:
        """Forget the topic's pages read more than `max_age_s` ago (a stream's heartbeat
        check: streams whose heartbeats fall within that time share one read)."""
        pages = self.pages.get(topic)
        if pages:
            now = time.monotonic()
            for key in [k for k, t in pages.items() if now - t.started_s > max_age_s]:
                del pages[key]

    async def _fetch(self, topic: str, from_seq: int, view: ReadView) -> PageRead:
        node = list(view.node) if isinstance(view.node, tuple) else view.node
        reply = await self.engine.call(topic, Diff(
            topic, from_seq, view.limit, node, view.include_tags, view.include_meta, 0,
            view.max_batch_bytes))
        data = None
        if reply["records"]:
            data = record_data(topic, from_seq, reply["next_from_seq"], reply["head_seq"],
                               render_records(reply["records"], view.include_meta,
                                              view.include_data))
        return PageRead(reply["next_from_seq"], reply["head_seq"], reply["caught_up"],
                    reply["tombstone"], data)
