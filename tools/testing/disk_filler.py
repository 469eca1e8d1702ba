"""DiskFiller: a thread that appends large batches to topics of one node until halted, so
its WAL files rotate every few appends and a full disk shows at once; it counts the
answers (acks, and refusals by error code) and the time of its latest ack."""

from __future__ import annotations

import collections
import threading
import time

from topics_actors.errors import TopicsError

RECORD_BYTES = 16_000
BATCH_RECORDS = 16          # 256 KiB an append


class DiskFiller(threading.Thread):
    def __init__(self, node, topics: list[str]):
        super().__init__(daemon=True, name="disk-filler")
        self.client = node.client(request_timeout_ms=5000, retry_deadline_ms=5000)
        self.topics = topics
        self.acked = 0
        self.last_ack_s = 0.0
        self.errors: collections.Counter[str] = collections.Counter()
        self.halt = threading.Event()

    def run(self) -> None:
        records = [{"data": {"pad": "x" * RECORD_BYTES}}] * BATCH_RECORDS
        while not self.halt.is_set():
            for topic in self.topics:
                try:
                    self.client.append(topic, records)
                except TopicsError as error:
                    self.errors[error.code.wire] += 1
                    self.halt.wait(0.02)
                    continue
                self.acked += 1
                self.last_ack_s = time.monotonic()

    def stop(self, timeout_s: float = 15) -> None:
        self.halt.set()
        self.join(timeout_s)
