"""Fault: SIGKILL of the compactor during checkpoints (at random instants and exactly at each
persistence step), then a clean restart checked against an oracle of acked writes.

Fault K-COMPACTOR-1: kill -9 of the compactor at seeded random instants while writer threads
append to fsync-class topics (and one disk-class topic) with checkpoints about every second.
Fault K-COMPACTOR-2: kill -9 of the compactor exactly at one checkpoint persistence step,
armed as a failpoint (segment put between .data and .idx, before the flush, before and after
the snapshot rename, before the prune), parametrized.

Asserted after a clean stop and a restart: every acked fsync-class write is present once,
with identical seq, data, tag and meta; no record that was never sent appears; seqs are
dense; the disk topic holds every acked record; checkpoints really happened (snapshots,
segment files, WAL files removed); after a failpoint kill, one completed checkpoint leaves
no segment file that neither kept snapshot lists.

Shared helpers (Writer, the oracle, log and disk probes) are used by
test_checkpoint_kill_shards.py too.
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading

import pytest

from tests.integration.test_node_ops import names_on
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


# --- K-COMPACTOR-1: random instants --------------------------------------------------------

@pytest.mark.timeout(90)
def test_sigkill_compactor_at_random_instants(make_node, data_dir):
    """Five kills at seeded random instants; checkpoints are stretched with sleeps at three
    persistence steps so a fair share of the kills lands inside one."""
    stretch = ("checkpoint::before_flush=sleep:80,snapshot::before_rename=sleep:80,"
               "checkpoint::before_prune=sleep:80")
    node = make_node(shards=2, data_dir=data_dir,
                     env=dict(FAST_CHECKPOINTS, TOPICS_FAILPOINTS=stretch))
    fsync_topics, disk_topic = spread_topics("cf", 2), "cdisk"
    make_topics(node, fsync_topics, [disk_topic])
    stop = threading.Event()
    writers = start_writers(node, fsync_topics * 2, stop, pad=200, pause_s=0.005)
    writers += start_writers(node, [disk_topic], stop, first_ident=100, batch=8, pad=400,
                             pause_s=0.002)
    wait_acked(writers, 10, "writers to get going")

    rng = random.Random(SEED)
    killed = []
    for kill in range(5):
        proc = wait_compactor_ready(node, kill + 1)
        wait_checkpoints(node, 1)      # this incarnation checkpoints before it is killed
        stop.wait(rng.uniform(0.2, 1.0))
        os.kill(proc["pid"], signal.SIGKILL)
        killed.append(proc["pid"])
    back = wait_compactor_ready(node, 6)
    assert back["pid"] not in killed
    assert node.log().count("child=compactor-00 state=down exit_code=-9") == 5
    wait_checkpoints(node, 1)
    wait_acked(writers, 5, "writers to continue after the last restart")
    finish(writers, stop)
    assert node.stop() == 0
    assert_log_clean(node)

    snaps = snapshot_ids(data_dir)
    assert snaps and snaps[0] > 5, f"too few checkpoints: {snaps}"
    assert [p for p in segment_files(data_dir).values() if "data" in p], "no segment files"
    wal = wal_idxs(data_dir)
    assert any(idxs and idxs[0] > 1 for idxs in wal.values()), f"no WAL file removed: {wal}"
    assert_no_orphan_segments(data_dir)

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers)
    assert node.stop() == 0
    assert_log_clean(node)


# --- K-COMPACTOR-2: exactly at each persistence step ---------------------------------------

PERSISTENCE_STEPS = ["segput::after_data_before_idx", "checkpoint::before_flush",
                     "snapshot::before_rename", "snapshot::after_rename",
                     "checkpoint::before_prune"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("site", PERSISTENCE_STEPS)
def test_sigkill_compactor_at_persistence_step(make_node, data_dir, site):
    node = make_node(shards=2, data_dir=data_dir,
                     env=dict(FAST_CHECKPOINTS, TOPICS_FAILPOINTS=f"{site}=kill"))
    fsync_topics, disk_topic = spread_topics("pf", 1), "pdisk"
    make_topics(node, fsync_topics, [disk_topic])
    stop = threading.Event()
    writers = start_writers(node, fsync_topics * 2, stop, pad=100)
    writers += start_writers(node, [disk_topic], stop, first_ident=100, batch=20, pad=300)
    wait_for(lambda: "child=compactor-00 state=down exit_code=-9" in node.log(), 30,
             f"the compactor to die at {site}")
    wait_for(lambda: compactor(node)["incarnation"] >= 2, 30, "the compactor's restart")
    wait_acked(writers, 5, "writers to continue after the compactor died")
    finish(writers, stop)
    node.stop()
    assert_log_clean(node)
    if site == "snapshot::before_rename":
        meta = os.listdir(os.path.join(data_dir, "meta"))
        assert [n for n in meta if n.endswith(".bin.tmp")], f"no temp snapshot left: {meta}"
    if site in ("snapshot::after_rename", "checkpoint::before_prune"):
        assert snapshot_ids(data_dir), "the killed checkpoint's snapshot was renamed"

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers)
    before, base = snapshot_ids(data_dir), len(checkpoints_logged(node))
    more = start_writers(node, fsync_topics + [disk_topic], threading.Event(),
                         first_ident=200, limit=20)
    finish(more, threading.Event())   # each ends after `limit` appends
    wait_checkpoints(node, 1, base)
    assert node.stop() == 0
    assert_log_clean(node)
    assert snapshot_ids(data_dir)[0] > (before[0] if before else 0)
    assert_no_orphan_segments(data_dir)

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers + more)
    assert node.stop() == 0
    assert_log_clean(node)
