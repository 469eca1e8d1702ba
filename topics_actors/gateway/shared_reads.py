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
from topics_actors.protocol.messages import Diff
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


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()    # a failure reaches every awaiting stream; never "unretrieved"


class SharedReads:
    def __init__(self, engine: EngineLink):
        self.engine = engine
        self.pages: dict[str, dict[tuple, asyncio.Task]] = {}
        self.fetched = 0
        self.shared = 0

    async def page(self, topic: str, from_seq: int, view: ReadView) -> PageRead:
        pages = self.pages.setdefault(topic, {})
        key = (from_seq, view)
        task = pages.get(key)
        if task is not None and not (task.done() and (task.cancelled() or task.exception())):
            self.shared += 1
        else:
            if len(pages) >= PAGES_PER_TOPIC_MAX:
                pages.clear()
            task = pages[key] = asyncio.ensure_future(self._fetch(topic, from_seq, view))
            task.started_s = time.monotonic()
            task.add_done_callback(_retrieve)
            self.fetched += 1
        return await asyncio.shield(task)

    def invalidate(self, topic: str) -> None:
        """The topic committed: pages read before may be behind its head."""
        self.pages.pop(topic, None)

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
