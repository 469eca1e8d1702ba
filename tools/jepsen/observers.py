"""Readers: what clients saw, for the oracle's check that nothing read later vanishes.

A Reader follows one topic from its cursor with diff reads, through each node in turn (a
node cut off or down is skipped after a short timeout), and remembers every record it was
shown: the number it held and when it was first seen. Readers see only records at or below
the high watermark, so each must still be there at the end, at the same seq (a power loss
of every replica excuses a disk or memory record, as for acked writes). A seq shown with two
numbers (`changed`, judged by the oracle: a memory topic may issue a lost seq again after
such a power loss), or a cursor the topic's head fell behind (the `recreated` tombstone),
is kept as it was seen.
"""

from __future__ import annotations

import threading
import time

from topics_actors.errors import TopicsError

READ_LIMIT = 500
READ_TIMEOUT_MS = 1500
IDLE_S = 0.05


class Reader(threading.Thread):
    def __init__(self, nodes: dict, topic: str):
        super().__init__(daemon=True, name=f"reader-{topic}")
        self.topic = topic
        self.clients = {nid: node.client(request_timeout_ms=READ_TIMEOUT_MS,
                                         retry_deadline_ms=READ_TIMEOUT_MS)
                        for nid, node in sorted(nodes.items())}
        self.seen: dict[int, tuple[int, float]] = {}   # seq -> (number, first seen at)
        # a seq shown with two numbers: (seq, first number, first seen at, number, at, node)
        self.changed: list[tuple[int, int, float, int, float, str]] = []
        self.fell_back: list[tuple[float, int, int]] = []   # (when, cursor, head)
        self.reads = 0
        self.halt = threading.Event()

    def run(self) -> None:
        cursor = 0
        while not self.halt.is_set():
            for nid, client in self.clients.items():
                if self.halt.is_set():
                    return
                try:
                    reply = client.diff(self.topic, from_seq=cursor, limit=READ_LIMIT)
                except (TopicsError, OSError):
                    continue
                except Exception:   # noqa: BLE001 - not the client's contract; go on
                    time.sleep(IDLE_S)
                    continue
                cursor = self._take(reply, cursor, nid)
            time.sleep(IDLE_S)

    def _take(self, reply: dict, cursor: int, nid: str) -> int:
        self.reads += 1
        now = time.monotonic()
        tombstone = reply.get("tombstone")
        if tombstone and tombstone.get("reason") == "recreated":
            self.fell_back.append((now, cursor, reply.get("head_seq", 0)))
        for record in reply.get("records", ()):
            seq, data = record["$seq"], record.get("data")
            number = data.get("n") if isinstance(data, dict) else data
            first = self.seen.get(seq)
            if first is None:
                self.seen[seq] = (number, now)
            elif first[0] != number:
                self.changed.append((seq, first[0], first[1], number, now, nid))
        return reply.get("next_from_seq", cursor)
