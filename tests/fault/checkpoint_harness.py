"""Writers with an oracle, and probes of a node's processes, log and data dir, for the tests
that SIGKILL the compactor during checkpoints (test_checkpoint_kill.py and
test_checkpoint_kill_shards.py)."""

from __future__ import annotations

import os
import re
import threading

from tools.testing.node_harness import names_on
from tools.testing.node_harness import wait_for
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import list_segment_files
from topics_actors.storage.snapshot import decode_snapshot, list_snapshots, read_file
from topics_actors.storage.wal_layout import list_wal_files

SEED = 20240611
MIB = 1024 * 1024
# Checkpoints are checked for once a second by the compactor; any growth makes one due.
FAST_CHECKPOINTS = {"TOPICS_CHECKPOINT_INTERVAL_MS": "200",
                    "TOPICS_CHECKPOINT_WAL_BYTES": str(256 * 1024),
                    "TOPICS_SEGMENT_MAX_EVENTS": "50",
                    "TOPICS_WAL_FILE_BYTES": str(MIB)}
CHECKPOINT_RE = re.compile(r"event=checkpoint snapshot=(\d+)")


# --- writers and the oracle ----------------------------------------------------------------

class Writer(threading.Thread):
    """Appends batches to one topic until stopped (or `limit` appends), `pause_s` apart.
    Remembers every record it sent and, per acked seq, what it acked: (data, tag, meta)."""

    def __init__(self, node, topic: str, ident: int, stop: threading.Event, *,
                 batch: int = 3, pad: int = 64, limit: int | None = None,
                 pause_s: float = 0.0):
        super().__init__(daemon=True)
        self.client = node.client(request_timeout_ms=1000, retry_deadline_ms=60_000)
        self.topic, self.writer_id, self.stop_event = topic, ident, stop
        self.batch, self.pad, self.limit, self.pause_s = batch, "p" * pad, limit, pause_s
        self.sent: set[tuple] = set()
        self.acked: dict[int, tuple] = {}
        self.appends = 0
        self.error: BaseException | None = None

    def record(self, n: int, k: int) -> dict:
        record = {"data": {"w": self.writer_id, "n": n, "k": k, "p": self.pad}}
        if k == 0:
            record["tag"] = f"w{self.writer_id}"
        if n % 2:
            record["meta"] = {"n": n}
        return record

    def run(self) -> None:
        try:
            while not self.stop_event.is_set() and self.appends != self.limit:
                n = self.appends
                batch = [self.record(n, k) for k in range(1 + n % self.batch)]
                self.sent.update(identity(r["data"]) for r in batch)
                reply = self.client.append(self.topic, batch)
                self.acked.update(zip(reply["seqs"], map(shape, batch)))
                self.appends += 1
                if self.pause_s:
                    self.stop_event.wait(self.pause_s)   # a steady load, not a flood
        except BaseException as exc:   # reported by the test, not swallowed
            self.error = exc


def shape(record: dict) -> tuple:
    return (record["data"], record.get("tag"), record.get("meta"))


def identity(data: dict) -> tuple:
    return (data["w"], data["n"], data["k"])


def start_writers(node, topics: list[str], stop: threading.Event, first_ident: int = 0,
                  **options) -> list[Writer]:
    writers = [Writer(node, topic, first_ident + i, stop, **options)
               for i, topic in enumerate(topics)]
    for writer in writers:
        writer.start()
    return writers


def finish(writers: list[Writer], stop: threading.Event) -> None:
    stop.set()
    for writer in writers:
        writer.join(60)
    assert [w.error for w in writers] == [None] * len(writers)
    assert not any(w.is_alive() for w in writers)


def wait_acked(writers: list[Writer], more: int, what: str, timeout_s: float = 60) -> None:
    """Wait until every writer has `more` acked appends beyond its count now."""
    base = {id(w): w.appends for w in writers}
    wait_for(lambda: all(w.appends >= base[id(w)] + more for w in writers), timeout_s, what)


def read_all(client, topic: str) -> dict[int, tuple]:
    records, cursor = {}, 0
    while True:
        page = client.diff(topic, from_seq=cursor, limit=1000, include_tags=True)
        records.update((r["$seq"], (r["data"], r.get("$tag"), r.get("meta")))
                       for r in page["records"])
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            return records


def check_oracle(client, writers: list[Writer], holes_ok: tuple[str, ...] = ()) -> dict:
    """Every topic against its writers' acks: nothing fabricated, every ack present with
    identical content, each sent record at most once, each writer's records in the order it
    sent them; seqs dense and head exact, except for `holes_ok` topics (disk class after a
    crash: head reservations turn into holes). Returns the record count per topic."""
    counts = {}
    for topic in sorted({w.topic for w in writers}):
        mine = [w for w in writers if w.topic == topic]
        acked = {seq: rec for w in mine for seq, rec in w.acked.items()}
        sent = set().union(*(w.sent for w in mine))
        stored = read_all(client, topic)
        fabricated = {s: r for s, r in stored.items() if identity(r[0]) not in sent}
        assert not fabricated, f"{topic}: records that were never sent: {fabricated}"
        missing = sorted(s for s, r in acked.items() if stored.get(s) != r)
        assert not missing, f"{topic}: acked seqs lost or changed: {missing[:20]}"
        idents = [identity(r[0]) for r in stored.values()]
        assert len(idents) == len(set(idents)), f"{topic}: a record is stored twice"
        assert stored == acked, f"{topic}: stored records that were not acked"
        for writer in mine:
            order = [identity(stored[s][0]) for s in sorted(writer.acked)]
            assert order == sorted(order), f"{topic}: writer {writer.writer_id} reordered"
        head = client.get_topic(topic)["head_seq"]
        if topic not in holes_ok:
            assert sorted(stored) == list(range(1, len(stored) + 1)), f"{topic}: not dense"
            assert head == len(stored), f"{topic}: head {head} != {len(stored)} records"
        else:
            assert head >= max(stored, default=0), f"{topic}: head below a record"
        counts[topic] = len(stored)
    return counts


def make_topics(node, fsync_topics: list[str], disk_topics: list[str]) -> None:
    admin = node.client()
    for topic in fsync_topics:
        admin.put_topic(topic, durability="fsync")
    for topic in disk_topics:
        admin.put_topic(topic, durability="disk")


def spread_topics(prefix: str, per_shard: int, shards: int = 2) -> list[str]:
    return [t for s in range(shards) for t in names_on(s, per_shard, prefix, shards)]


# --- the node's processes and log ----------------------------------------------------------

def compactor(node) -> dict:
    return next(p for p in node.status()["processes"] if p["role"] == "compactor")


def wait_compactor_ready(node, incarnation: int, timeout_s: float = 30) -> dict:
    def ready():
        proc = compactor(node)
        return proc if proc["incarnation"] >= incarnation and proc["state"] == "ready" else None
    return wait_for(ready, timeout_s, f"compactor incarnation {incarnation} to be ready")


def wait_shard_ready(node, shard: int, incarnation: int, timeout_s: float = 30) -> dict:
    def ready():
        info = node.status()["shards"][shard]
        return info if info["incarnation"] >= incarnation and info["state"] == "ready" else None
    return wait_for(ready, timeout_s, f"shard {shard} incarnation {incarnation} to be ready")


def assert_log_clean(node) -> None:
    """No process of the node logged an error or a traceback (a SIGKILL logs nothing)."""
    bad = [line for line in node.log().splitlines() if " ERROR " in line or "Traceback" in line]
    assert not bad, "\n".join(bad[:20])


def checkpoints_logged(node) -> list[int]:
    return [int(m) for m in CHECKPOINT_RE.findall(node.log())]


def wait_checkpoints(node, count: int, base: int | None = None,
                     timeout_s: float = 30) -> list[int]:
    """Wait until the node's log shows `count` more completed checkpoints than `base` (by
    default: than now)."""
    base = len(checkpoints_logged(node)) if base is None else base
    return wait_for(lambda: (lambda ids: ids if len(ids) >= base + count else None)(
        checkpoints_logged(node)), timeout_s, f"{count} more checkpoint(s)")


# --- what is on disk -----------------------------------------------------------------------

def snapshot_ids(data_dir: str) -> list[int]:
    return [snap_id for snap_id, _ in list_snapshots(RealFs(), data_dir)]


def segment_files(data_dir: str) -> dict[tuple[str, int], set[str]]:
    """(topic dir name, first seq) -> parts present, over every topic directory."""
    root, found = os.path.join(data_dir, "topics"), {}
    if os.path.isdir(root):
        for name in os.listdir(root):
            for first, parts in list_segment_files(RealFs(), os.path.join(root, name)).items():
                found[(name, first)] = parts
    return found


def listed_segments(data_dir: str, newest: int = 2) -> set[tuple[str, int]]:
    """(topic dir name, first seq) of every segment the `newest` snapshots list."""
    listed = set()
    for _, path in list_snapshots(RealFs(), data_dir)[:newest]:
        for entry in decode_snapshot(read_file(RealFs(), path))["topics"]:
            for first, *_ in entry["segments"]:
                listed.add((os.path.basename(entry["dir"]), first))
    return listed


def wal_idxs(data_dir: str) -> dict[str, list[int]]:
    root = os.path.join(data_dir, "wal")
    return {name: [idx for idx, _ in list_wal_files(RealFs(), os.path.join(root, name))]
            for name in sorted(os.listdir(root)) if name.startswith("shard-")}


def assert_no_orphan_segments(data_dir: str) -> None:
    files = segment_files(data_dir)
    listed = listed_segments(data_dir)
    orphans = sorted(key for key, parts in files.items() if key not in listed)
    assert not orphans, f"segment files no kept snapshot lists: {orphans}"
    meta = os.listdir(os.path.join(data_dir, "meta"))
    assert not [n for n in meta if n.endswith(".tmp")], f"stray snapshot temp files: {meta}"
    assert len(snapshot_ids(data_dir)) <= 2, f"more than two snapshots kept: {meta}"
