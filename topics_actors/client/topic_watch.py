"""`watch` for the client library: the events of spec/api.md 7.2 over ZeroMQ, straight from
the shards, as an async iterator of dicts.

One task per topic reads with `diff` (a long-poll of `wait_ms` once the topic is caught up,
so an idle watch asks each shard once per `wait_ms` and an append answers at once) and hands
each page to the iterator, which turns it into events with topics_actors.watch_cursor, the
same rules as the SSE stream. Every event carries `id`, the composite cursor after it:
`watch(..., cursor=event["id"])` resumes right after that event, missing and repeating
nothing. The iterator ends when every watched topic is deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from topics_actors.client import request_shapes as shapes
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.limits import DIFF_WAIT_MS_MAX, clamp
from topics_actors.watch_cursor import PageRead, WatchCursors, WatchEvent, decode_cursor

WATCH_WAIT_MS_DEFAULT = 15_000


def start_cursors(topics: Iterable[str] | dict, cursor: str | dict | None) -> dict[str, int]:
    """{topic: from_seq}: a list of names starts at 0, a map gives each topic's from_seq, and
    a cursor (an event's `id`, or its map) sets the topics it names."""
    cursors = dict(topics) if isinstance(topics, dict) else dict.fromkeys(topics, 0)
    if not cursors:
        raise TopicsError("watch at least one topic", ErrorCode.INVALID_REQUEST)
    given = decode_cursor(cursor) if isinstance(cursor, str) else cursor
    if cursor is not None and given is None:
        raise TopicsError("cursor is not a watch event id", ErrorCode.INVALID_REQUEST)
    cursors.update((t, s) for t, s in (given or {}).items() if t in cursors)
    return cursors


def _as_dict(event: WatchEvent) -> dict:
    return {"event": event.event, "id": event.cursor_id.decode(), **event.data}


class _Pages:
    """The per-topic readers and the queue of pages they fill (one page per topic at a
    time: a reader waits until its page has been turned into events)."""

    def __init__(self, client, options: dict, wait_ms: int):
        self.client, self.options, self.wait_ms = client, options, wait_ms
        self.queue: asyncio.Queue = asyncio.Queue()
        self.tasks: list[asyncio.Task] = []

    def start(self, state: WatchCursors) -> None:
        for topic in state.cursors:
            self.tasks.append(asyncio.ensure_future(self._read(topic, state)))

    async def _read(self, topic: str, state: WatchCursors) -> None:
        """Read one topic for ever; a deleted topic ends its part."""
        o, live = self.options, False
        while True:
            wait_ms = self.wait_ms if live else 0
            msg = shapes.diff_request(topic, state.cursors[topic], o["limit"], o["node"],
                                      o["include_tags"], o["include_meta"], wait_ms,
                                      o["max_batch_bytes"])
            try:
                reply = await self.client.request(topic, msg, wait_ms)
            except TopicsError as error:
                if error.code is not ErrorCode.TOPIC_NOT_FOUND:
                    raise
                reply = None
            done = asyncio.get_running_loop().create_future()
            await self.queue.put((topic, reply, done))
            await done
            if reply is None:
                return
            live = reply["caught_up"]

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()


def _events(state: WatchCursors, topic: str, reply: dict | None, options: dict) -> list:
    if reply is None:
        return [state.delete(topic)]
    records = None
    if reply["records"]:
        records = {"topic": topic, "from_seq": state.cursors[topic],
                   "to_seq": reply["next_from_seq"], "head_seq": reply["head_seq"],
                   "records": [shapes.api_record(r, options["include_meta"])
                               for r in reply["records"]]}
    return state.read(topic, PageRead(reply["next_from_seq"], reply["head_seq"],
                                      reply["caught_up"], reply["tombstone"], records))


async def watch_events(client, topics, *, cursor=None, node=None, limit: int = 0,
                       include_tags: bool = False, include_meta: bool = True,
                       max_batch_bytes: int = 0,
                       wait_ms: int = WATCH_WAIT_MS_DEFAULT) -> AsyncIterator[dict]:
    state = WatchCursors(start_cursors(topics, cursor))
    # a topic missing at the start fails the watch (topic_not_found, as POST /v0/watch)
    await asyncio.gather(*(client.get_topic(t, touch=False) for t in state.cursors))
    options = {"node": node, "limit": limit, "include_tags": include_tags,
               "include_meta": include_meta, "max_batch_bytes": max_batch_bytes}
    pages = _Pages(client, options, clamp(wait_ms, 1, DIFF_WAIT_MS_MAX))
    pages.start(state)
    try:
        while not state.finished():
            for task in pages.tasks:       # a reader's error (not a delete) ends the watch
                if task.done() and not task.cancelled() and task.exception():
                    raise task.exception()
            getter = asyncio.ensure_future(pages.queue.get())
            running = [t for t in pages.tasks if not t.done()]
            await asyncio.wait([getter, *running], return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            topic, reply, done = getter.result()
            for event in _events(state, topic, reply, options):
                yield _as_dict(event)
            done.set_result(None)
    finally:
        pages.close()
