"""A mixed client load with an oracle, for kill tests (tools/crashtest, the kill matrix
tests/fault/test_kill_matrix.py).

One thread per topic, so each topic's oracle is written by one thread only: fsync, disk,
memory and ephemeral topics get batches of 1-3 records (tags `keep`/`drop`, meta on some),
every 9th operation deletes records below a seq, every 14th deletes by the tag `drop`; a
churn topic (fsync) is created, written, deleted and created again (a new incarnation).
A request that got no answer by the client's deadline is *maybe*: it may or may not have
happened. Appends carry idempotency keys (the client's), so its retries never duplicate.

`verify(client)` (the load paused) returns the violations of spec/storage.md 7 it sees:
  - a record that was never sent, or from an older incarnation, or stored twice [4, 61]
  - an acked fsync/disk record missing or changed (process kills lose nothing) [1, 2]
  - a deleted record back [37], a tombstone for voluntary deletes [41]
  - fsync/disk head below an acked seq [7, 8]
Memory and ephemeral topics: only no fabrication (any subset may survive a restart) [60].
"""

from __future__ import annotations

import sys
import threading
import traceback

from topics_actors.errors import TopicsError

CLASSES = {"kf0": "fsync", "kf1": "fsync", "kd0": "disk", "kd1": "disk", "km": "memory",
           "ke": "ephemeral"}
CHURN = "kchurn"
VERIFIED = ("fsync", "disk")


def shape(record: dict) -> tuple:
    return (record["data"], record.get("tag"), record.get("meta"))


def identity(data: dict) -> tuple:
    return (data["i"], data["n"], data["k"])


class TopicLog:
    """What one thread did to one topic, and what the node owes it."""

    def __init__(self, name: str, durability: str):
        self.name, self.durability = name, durability
        self.incarnation, self.n = 0, 0
        self.sent: dict[tuple, tuple] = {}       # identity -> shape (every incarnation)
        self.acked: dict[int, tuple] = {}        # seq -> shape (this incarnation)
        self.maybe: set[tuple] = set()           # identities of unanswered appends
        self.floor = 0                           # seqs <= floor deleted (acked)
        self.victims: set[int] = set()           # seqs deleted by tag (acked)
        self.maybe_floor = 0
        self.maybe_victims: set[int] = set()
        self.max_acked = 0
        self.known = True                        # False: a create/delete went unanswered
        self.ops = 0

    def new_incarnation(self) -> None:
        self.incarnation += 1
        self.acked, self.maybe = {}, set()
        self.floor = self.maybe_floor = self.max_acked = 0
        self.victims, self.maybe_victims = set(), set()

    def batch(self) -> list[dict]:
        self.n += 1
        out = []
        for k in range(1 + self.n % 3):
            record = {"data": {"t": self.name, "i": self.incarnation, "n": self.n, "k": k},
                      "tag": "drop" if (self.n + k) % 4 == 0 else "keep"}
            if k == 1:
                record["meta"] = {"n": self.n}
            out.append(record)
            self.sent[identity(record["data"])] = shape(record)
        return out

    def step(self, client) -> None:
        """One operation: mostly an append, sometimes a delete."""
        self.ops += 1
        if self.ops % 9 == 0 and self.max_acked > 10:
            floor = self.max_acked - 10
            self._call(lambda: client.delete_records(self.name, before_seq=floor + 1),
                       lambda _: setattr(self, "floor", max(self.floor, floor)),
                       lambda: setattr(self, "maybe_floor", max(self.maybe_floor, floor)))
        elif self.ops % 14 == 0:
            drop = {s for s, r in self.acked.items() if r[1] == "drop"}
            self._call(lambda: client.delete_records(self.name, match="drop"),
                       lambda _: self.victims.update(drop),
                       lambda: self.maybe_victims.update(drop))
        else:
            records = self.batch()
            self._call(lambda: client.append(self.name, records, create=True,
                                             config={"durability": self.durability}),
                       lambda reply: self._acked(reply["seqs"], records),
                       lambda: self.maybe.update(identity(r["data"]) for r in records))

    def _acked(self, seqs: list[int], records: list[dict]) -> None:
        self.acked.update(zip(seqs, map(shape, records)))
        self.max_acked = max(self.max_acked, *seqs)

    @staticmethod
    def _call(request, on_reply, on_silence) -> None:
        try:
            reply = request()
        except TopicsError as error:
            if not error.retryable:
                raise
            on_silence()
            return
        on_reply(reply)

    # --- checking ----------------------------------------------------------------------------

    def verify(self, client) -> tuple[list[str], int]:
        """(violations, acked records checked: present and identical or deleted)."""
        if not self.known:
            return [], 0
        try:
            stored, info, tombstone = read_all(client, self.name)
        except TopicsError as error:
            if error.code.name == "TOPIC_NOT_FOUND" and not self.acked:
                return [], 0
            return [f"{self.name}: {error!r}"], 0
        bad, where = [], f"{self.name} ({self.durability}, incarnation {self.incarnation})"
        seen = set()
        for seq, got in stored.items():
            ident = identity(got[0])
            if self.sent.get(ident) != got or ident[0] != self.incarnation:
                bad.append(f"{where}: seq {seq} holds {got}: never sent in this incarnation")
            elif ident in seen:
                bad.append(f"{where}: {ident} stored twice")
            elif self.acked.get(seq, got) != got and ident not in self.maybe:
                bad.append(f"{where}: seq {seq} holds {got}, acked {self.acked[seq]}")
            elif self.durability in VERIFIED and (seq <= self.floor or seq in self.victims):
                bad.append(f"{where}: deleted seq {seq} came back")
            seen.add(ident)
        intact = 0
        if self.durability in VERIFIED:
            for seq, want in self.acked.items():
                gone = (seq <= max(self.floor, self.maybe_floor)
                        or seq in self.victims or seq in self.maybe_victims)
                if not gone and stored.get(seq) != want:
                    bad.append(f"{where}: acked seq {seq} lost or changed: {stored.get(seq)}")
                intact += 1          # checked: present and identical, or deleted and gone
            if info["head_seq"] < self.max_acked:
                bad.append(f"{where}: head {info['head_seq']} below acked {self.max_acked}")
            if tombstone is not None:
                bad.append(f"{where}: a tombstone {tombstone} without eviction")
        return bad, intact


def read_all(client, topic: str) -> tuple[dict, dict, dict | None]:
    """(seq -> shape of every record, get_topic, the tombstone of a read from 0)."""
    records, cursor, tombstone = {}, 0, None
    info = client.get_topic(topic, touch=False)
    while True:
        page = client.diff(topic, from_seq=cursor, limit=1000, include_tags=True)
        if cursor == 0:
            tombstone = page.get("tombstone")
        records.update((r["$seq"], (r["data"], r.get("$tag"), r.get("meta")))
                       for r in page["records"])
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            return records, info, tombstone


class ChurnLog(TopicLog):
    """A topic that is deleted and created again every 12 operations."""

    def step(self, client) -> None:
        self.ops += 1
        if self.ops % 12 == 0:
            self._call(lambda: client.delete_topic(self.name),
                       lambda _: (setattr(self, "known", True), self.new_incarnation()),
                       lambda: setattr(self, "known", False))
        elif self.ops % 12 == 1:
            self._call(lambda: client.put_topic(self.name, durability=self.durability),
                       lambda _: None, lambda: setattr(self, "known", False))
        else:
            super().step(client)


class Load:
    """The topics' logs (kept across node restarts) and their threads (one run per start)."""

    def __init__(self):
        self.logs = [TopicLog(n, d) for n, d in CLASSES.items()] + [ChurnLog(CHURN, "fsync")]
        self.threads: list[threading.Thread] = []
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []

    @property
    def acked(self) -> int:
        return sum(len(log.acked) for log in self.logs)

    def start(self, node) -> None:
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(node, log), daemon=True,
                                         name=f"load-{log.name}") for log in self.logs]
        for thread in self.threads:
            thread.start()

    def _run(self, node, log: TopicLog) -> None:
        client = node.client(request_timeout_ms=1000, retry_deadline_ms=30_000)
        try:
            while not self.stop_event.is_set():
                log.step(client)
        except BaseException as exc:   # reported by verify, never swallowed
            self.errors.append(exc)

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(60)
        frames = sys._current_frames()
        for thread in self.threads:
            if thread.is_alive():   # where it hangs is the whole diagnosis: keep the stack
                frame = frames.get(thread.ident)
                stack = "".join(traceback.format_stack(frame)) if frame else "(ended)"
                self.errors.append(RuntimeError(f"load thread {thread.name} did not stop "
                                                f"in 60 s; its stack:\n{stack}"))

    def verify(self, client) -> tuple[list[str], int]:
        """(violations, acked records found intact), the load stopped."""
        bad = [f"load thread failed: {type(exc).__name__}: {exc}" for exc in self.errors]
        intact = 0
        for log in self.logs:
            more, count = log.verify(client)
            bad += more
            intact += count
        return bad, intact
