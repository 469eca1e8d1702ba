"""ShardCore: request results, validation, batch commit, failure rollback, idempotency."""

from __future__ import annotations

import pytest

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.limits import INBOX_REQUESTS_MAX
from topics_actors.protocol.control import Heartbeat, PlaceTopic
from topics_actors.protocol.messages import (
    Append, DeleteTopic, Diff, GetTopic, ListTopics, PutTopic, Status,
)
from topics_actors.shard import batch_stager
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.wal_scan import FileScan


def rec(data: bytes = b'{"x":1}', tag=None, node=None, meta=None) -> list:
    return [data, tag, node, meta]


def code(reply) -> str:
    assert isinstance(reply, TopicsError), reply
    return reply.code.wire


def wal_frames(h) -> list:
    out = []
    for _, path in h.wal_files():
        scan = FileScan(h.fs, path)
        out += [(f.type, f.seq, f.data) for f in scan.frames()]
        scan.close()
    return out


# --- results ---------------------------------------------------------------------------------

def test_append_creates_and_returns_contiguous_seqs(shard):
    reply = shard.append("t", rec(b'{"a":1}'), rec(b"[2]"), rec(b'"three"'))
    assert {k: reply[k] for k in ("topic", "first_seq", "last_seq", "head_seq", "count",
                                  "created", "deduped", "seqs")} == {
        "topic": "t", "first_seq": 1, "last_seq": 3, "head_seq": 3, "count": 3,
        "created": True, "deduped": False, "seqs": [1, 2, 3]}
    assert set(reply["performance"]) == {"server_total_ms", "wal_append_ms", "fsync_ms"}
    again = shard.append("t", rec(), return_seqs=False)
    assert (again["first_seq"], again["last_seq"], again["created"]) == (4, 4, False)
    assert "seqs" not in again


def test_diff_returns_records_with_tag_node_and_meta(shard):
    shard.call(Append("t", [rec(b'{"a":1}', "tag-1", None, b'{"k":"v"}'),
                            rec(b"2", None, "own-node"), rec(b"3", "é")], node="batch-node"))
    reply = shard.call(Diff("t", 0, include_tags=True))
    records = [[r[0], *r[2:]] for r in reply["records"]]
    assert records == [[1, b'{"d":{"a":1},"m":{"k":"v"}}', "tag-1", "batch-node", True],
                       [2, b'{"d":2}', None, "own-node", False],
                       [3, b'{"d":3}', "é", "batch-node", False]]
    assert all(isinstance(r[1], int) and r[1] > 0 for r in reply["records"])
    assert (reply["next_from_seq"], reply["head_seq"], reply["caught_up"], reply["lag"],
            reply["tombstone"]) == (3, 3, True, 0, None)
    no_tags = shard.call(Diff("t", 1, limit=1))
    assert [r[0] for r in no_tags["records"]] == [2] and no_tags["records"][0][3] is None
    assert (no_tags["next_from_seq"], no_tags["caught_up"], no_tags["lag"]) == (2, False, 1)
    skip_own = shard.call(Diff("t", 0, node="batch-node"))
    assert [r[0] for r in skip_own["records"]] == [2]
    skip_both = shard.call(Diff("t", 0, node=["batch-node", "own-node"]))
    assert skip_both["records"] == [] and skip_both["next_from_seq"] == 3


def test_node_filter_is_off_without_dedupe_node(shard):
    shard.put("all", dedupe_node=False)
    shard.call(Append("all", [rec(b"1"), rec(b"2", None, "other")], node="me"))
    reply = shard.call(Diff("all", 0, node="me"))
    assert [r[0] for r in reply["records"]] == [1, 2]


def test_put_get_list_delete(shard):
    created = shard.put("a", durable=True, ttl_ms=0)
    assert created["created"] is True and created["config"]["durability"] == "fsync"
    same = shard.put("a", durable=True)
    assert same["created"] is False
    updated = shard.put("a", durability="memory")
    assert updated["config"]["durability"] == "memory"
    assert shard.get("a")["config"]["durability"] == "memory"
    for name in ("b", "c1", "c2"):
        shard.put(name)
    listed = shard.call(ListTopics())
    assert [t["topic"] for t in listed["topics"]] == ["a", "b", "c1", "c2"]
    page = shard.call(ListTopics(prefix="c", limit=1))
    assert [t["topic"] for t in page["topics"]] == ["c1"] and page["more"] is True
    rest = shard.call(ListTopics(prefix="c", after="c1"))
    assert [t["topic"] for t in rest["topics"]] == ["c2"] and rest["more"] is False
    assert shard.call(DeleteTopic("b"))["deleted"] is True
    second = shard.call(DeleteTopic("b"))
    assert (second["deleted"], second["routers_removed"]) == (False, [])
    assert shard.call(DeleteTopic("a"))["deleted"] is True
    with pytest.raises(TopicsError) as info:
        shard.get("a")
    assert info.value.code is ErrorCode.TOPIC_NOT_FOUND
    assert [t["topic"] for t in shard.call(ListTopics())["topics"]] == ["c1", "c2"]
    shard.restart(crash=True)
    assert [t["topic"] for t in shard.call(ListTopics())["topics"]] == ["c1", "c2"]


def test_get_topic_state(shard):
    shard.append("t", rec(b"1"), rec(b"22"), rec(b"333", None, None, b"{}"))
    state = shard.get("t")
    assert (state["head_seq"], state["next_seq"], state["earliest_seq"], state["count"],
            state["bytes"], state["type"]) == (3, 4, 1, 3, 1 + 2 + 3 + 2, "log")
    status = shard.call(Status())
    assert status["topics"] == 1 and status["ready"] is True


def test_delete_if_empty(shard):
    shard.put("empty")
    shard.append("full")
    assert code(shard.batch(DeleteTopic("full", if_empty=True))[0]) == "topic_not_empty"
    assert shard.get("full")["head_seq"] == 1
    assert shard.call(DeleteTopic("empty", if_empty=True))["deleted"] is True


# --- validation changes nothing --------------------------------------------------------------

INVALID = [
    (Append("t", []), "invalid_request"),
    (Append("t", [[b"not json"]]), "invalid_request"),
    (Append("t", [[b""]]), "invalid_request"),
    (Append("t", [[b"1", 5]]), "invalid_request"),
    (Append("t", [[b"1", "x" * 257]]), "invalid_request"),
    (Append("t", [[b"1", None, None, b"{bad"]]), "invalid_request"),
    (Append("t", [[b"1"]], node="n" * 129), "invalid_request"),
    (Append("t", [[b"1"]] * 10_001), "batch_too_large"),
    (Append("t", [[b'"' + b"x" * 1_048_576 + b'"']]), "record_too_large"),
    (Append("t", [[b"1"]], idempotency_key="k" * 257), "invalid_request"),
    (Append("bad name!", [[b"1"]]), "invalid_request"),
    (Append("missing", [[b"1"]], create=False), "topic_not_found"),
    (Append("missing", [[b"1"]], config={"durability": "nope"}), "invalid_request"),
    (PutTopic("t", {"type": "queue"}), "topic_exists_incompatible"),
    (PutTopic("t", {"ttl_ms": -1}), "invalid_request"),
    (PutTopic("bad/name", None), "invalid_request"),
    (GetTopic("missing"), "topic_not_found"),
    (Diff("missing"), "topic_not_found"),
]


@pytest.mark.parametrize("msg,wire", INVALID, ids=[f"{i}-{w}" for i, (_, w) in enumerate(INVALID)])
def test_validation_errors_change_nothing(shard, msg, wire):
    shard.put("t", durable=True)
    shard.append("t", rec(b"1"))
    topic = shard.core.registry.topics["t"]
    before = (shard.snapshot(), shard.fs.mutations(), topic.next_seq)
    reply = shard.batch(msg)[0]
    assert code(reply) == wire
    assert (shard.snapshot(), shard.fs.mutations(), topic.next_seq) == before
    assert shard.append("t")["first_seq"] == 2


def test_an_invalid_request_does_not_disturb_its_batch(shard):
    replies = shard.batch(Append("t", [rec(b"1")]), Append("t", [[b"nope"]]),
                          Append("t", [rec(b"3")]))
    assert replies[0]["first_seq"] == 1 and replies[2]["first_seq"] == 2
    assert code(replies[1]) == "invalid_request"
    assert [r[0] for r in shard.records("t")] == [1, 2]



@pytest.mark.parametrize("msg", [
    Heartbeat("shard", 0, 1, "ready"),
    PlaceTopic("shard", 0, 1, "t", {}),
], ids=["heartbeat", "place_topic"])
def test_a_kind_meant_for_another_process_is_refused_not_fatal(shard, msg):
    """Any peer of the shard's sockets can send any kind the codec knows; one the shard
    does not serve (a child's heartbeat, a shard's placement request to its supervisor)
    gets a clear error, and the batch it came in goes on."""
    shard.append("t")
    replies = shard.batch(msg, Append("t", [rec(b"2")]))
    assert code(replies[0]) == "invalid_request"
    assert "does not serve" in str(replies[0])
    assert replies[1]["first_seq"] == 2

# --- group commit ----------------------------------------------------------------------------

def test_fsync_batch_writes_once_and_syncs_once(shard):
    for name in ("f1", "f2"):
        shard.put(name, durable=True)
    fs = shard.fs
    writes, syncs = fs.count("write_at"), fs.count("sync_data")
    msgs = [Append(f"f{i % 2 + 1}", [rec(b"%d" % i)]) for i in range(200)]
    replies = shard.batch(*msgs)
    assert all(isinstance(r, dict) for r in replies)
    assert fs.count("sync_data") - syncs == 1
    assert fs.count("write_at") - writes == 1
    assert shard.get("f1")["head_seq"] == shard.get("f2")["head_seq"] == 100
    assert replies[-1]["performance"]["fsync_ms"] > 0


def test_each_fsync_commit_syncs(shard):
    shard.put("f", durable=True)
    syncs = shard.fs.count("sync_data")
    for _ in range(3):
        shard.append("f")
    assert shard.fs.count("sync_data") - syncs == 3


def test_disk_class_syncs_only_to_move_its_head_reservation(shard):
    shard.put("d")                                       # default durability: disk
    syncs = shard.fs.count("sync_data")
    shard.append("d")                                    # crosses the reservation: fsync
    assert shard.fs.count("sync_data") - syncs == 1
    for _ in range(20):
        shard.append("d", rec(), rec())
    assert shard.fs.count("sync_data") - syncs == 1      # buffered writes only
    types = [t for t, _, _ in wal_frames(shard)]
    assert types.count(FrameType.HEAD_WATERMARK) == 1
    shard.call(Append("d", [rec()] * 300))               # past 1 + 256: a new reservation
    assert shard.fs.count("sync_data") - syncs == 2


def test_memory_and_ephemeral_appends_do_not_sync(shard):
    shard.put("m", durability="memory")
    shard.put("e", durability="ephemeral")
    syncs, writes = shard.fs.count("sync_data"), shard.fs.count("write_at")
    shard.append("m", rec(), rec())
    assert shard.fs.count("sync_data") == syncs and shard.fs.count("write_at") == writes + 1
    shard.append("e", rec(b'{"e":1}'))
    assert shard.fs.count("write_at") == writes + 1      # ephemeral records never hit the WAL
    assert [r[2] for r in shard.records("e")] == [b'{"d":{"e":1}}']
    assert shard.get("e")["head_seq"] == 1


def test_reads_in_a_batch_see_committed_state(shard):
    shard.put("f", durable=True)
    shard.append("f", rec(b"1"))
    replies = shard.batch(GetTopic("f"), Append("f", [rec(b"2"), rec(b"3")]),
                          Diff("f", 0), GetTopic("f"), ListTopics())
    assert replies[0]["head_seq"] == 1                   # submitted before the write
    assert [r[0] for r in replies[2]["records"]] == [1, 2, 3]
    assert replies[3]["head_seq"] == 3 and replies[3]["count"] == 3
    assert replies[4]["topics"][0]["head_seq"] == 3


def test_staged_but_uncommitted_records_are_invisible(shard):
    shard.put("f", durable=True)
    shard.core.submit(b"p", 1, Append("f", [rec()]), 0)
    assert shard.core.registry.topics["f"].head == 0              # staged only
    assert shard.core.has_work()
    shard.core.commit()
    assert shard.core.registry.topics["f"].head == 1


# --- failed batches ------------------------------------------------------------------------

FAULTS = [("write_at", "eio"), ("write_at", "enospc"), ("sync_data", "eio")]


@pytest.mark.parametrize("op,kind", FAULTS)
def test_failed_commit_fails_every_write_and_publishes_nothing(shard, op, kind):
    shard.put("keep", durable=True)
    shard.put("cfg", ttl_ms=5)
    shard.put("gone", durable=True)
    shard.append("keep", rec(b"1"), rec(b"2"))
    before = shard.snapshot()
    mutations = shard.fs.mutations()
    shard.fs.fail(op, kind=kind)
    replies = shard.batch(
        Append("keep", [rec(b"3"), rec(b"4")], idempotency_key="k"),
        GetTopic("keep"),
        Append("fresh", [rec(b"1")]),
        PutTopic("cfg", {"ttl_ms": 9}),
        PutTopic("born", {"durable": True}),
        DeleteTopic("gone"),
        Diff("keep", 0),
    )
    assert shard.fs.fired and shard.fs.mutations() > mutations
    expected = "insufficient_storage" if kind == "enospc" else "internal"   # 507: disk full
    for i in (0, 2, 3, 4, 5):
        assert code(replies[i]) == expected and replies[i].retryable is False
    assert replies[1]["head_seq"] == 2                   # reads still answered ...
    assert [r[0] for r in replies[6]["records"]] == [1, 2]   # ... with committed state
    assert shard.snapshot() == before                    # nothing published or staged
    assert not shard.exists("fresh") and not shard.exists("born") and shard.exists("gone")
    assert shard.core.stats.failed_batches == 1

    later = shard.append("keep", rec(b'"later"'), idempotency_key="k")
    assert (later["first_seq"], later["deduped"]) == (3, False)   # key was not kept
    shard.restart(crash=True)
    assert shard.get("keep")["head_seq"] == 3
    assert [r[2] for r in shard.records("keep")] == [b'{"d":1}', b'{"d":2}', b'{"d":"later"}']
    assert not shard.exists("fresh") and not shard.exists("born") and shard.exists("gone")
    assert shard.get("cfg")["config"]["ttl_ms"] == 5


def test_short_writes_still_commit(shard):
    shard.put("f", durable=True)
    shard.fs.fail("write_at", kind="short")
    shard.fs.fail("write_at", at=shard.fs.count("write_at") + 1, kind="short")
    writes = shard.fs.count("write_at")
    reply = shard.append("f", rec(b'"%s"' % (b"y" * 500)), rec(b"2"))
    assert reply["last_seq"] == 2 and shard.fs.count("write_at") - writes == 3
    shard.restart(crash=True)
    assert [r[0] for r in shard.records("f")] == [1, 2]
    assert shard.records("f")[0][2] == b'{"d":"%s"}' % (b"y" * 500)


def test_failed_fsync_bytes_are_erased_from_the_wal(shard):
    shard.put("f", durable=True)
    shard.fs.fail("sync_data")
    assert code(shard.batch(Append("f", [rec(b'"lost"')]))[0]) == "internal"
    assert all(b"lost" not in data for _, _, data in wal_frames(shard))
    for _, path in shard.wal_files():
        with open(path, "rb") as handle:
            assert b"lost" not in handle.read()


def test_failure_in_a_disk_batch_restores_the_reservation(shard):
    shard.put("d")
    shard.fs.fail("write_at")
    assert code(shard.batch(Append("d", [rec()]))[0]) == "internal"
    topic = shard.core.registry.topics["d"]
    assert (topic.head, topic.next_seq, topic.reserved_head) == (0, 1, 0)
    syncs = shard.fs.count("sync_data")
    assert shard.append("d")["first_seq"] == 1
    assert shard.fs.count("sync_data") == syncs + 1      # the reservation is logged again
    assert topic.reserved_head == 257


def test_a_failed_batch_does_not_disturb_the_next_one_in_memory(shard):
    shard.put("m", durability="memory")
    shard.append("m")
    shard.fs.fail("write_at")
    assert code(shard.batch(Append("m", [rec(), rec()]))[0]) == "internal"
    assert shard.append("m")["first_seq"] == 2
    assert [r[0] for r in shard.records("m")] == [1, 2]


def test_failed_delete_of_an_ephemeral_topic_keeps_its_records(shard):
    """Regression: a failed delete used to drop the topic's RAM buffer (KeyError on read)."""
    shard.put("e", durability="ephemeral")
    shard.append("e", rec(b"1"), rec(b"2"))
    shard.fs.fail("write_at")
    assert code(shard.batch(DeleteTopic("e"))[0]) == "internal"
    assert shard.get("e")["head_seq"] == 2
    assert [r[2] for r in shard.records("e")] == [b'{"d":1}', b'{"d":2}']


def test_latched_writer_refuses_every_later_batch(shard):
    shard.put("f", durable=True)
    shard.fs.fail("write_at", always=True)               # the undo cannot erase either
    assert code(shard.batch(Append("f", [rec()]))[0]) == "internal"
    assert shard.core.wal.writer.latched
    shard.fs.clear()
    assert code(shard.batch(Append("f", [rec()]))[0]) == "internal"
    assert shard.get("f")["head_seq"] == 0
    assert shard.core.stats.failed_batches == 2


def test_failed_delete_and_recreate_in_one_batch_restores_the_topic(shard):
    shard.put("t", durable=True)
    shard.append("t", rec(b"1"), rec(b"2"))
    shard.fs.fail("sync_data")
    replies = shard.batch(DeleteTopic("t"), Append("t", [rec(b'"x"')]), Diff("t", 0))
    assert code(replies[0]) == code(replies[1]) == "internal"
    assert [r[0] for r in replies[2]["records"]] == [1, 2]
    assert shard.get("t")["config"]["durability"] == "fsync"
    assert shard.core.registry.names == ["t"] and len(shard.core.registry.by_tid) == 1
    assert shard.append("t")["first_seq"] == 3
    shard.restart(crash=True)
    assert [r[2] for r in shard.records("t")] == [b'{"d":1}', b'{"d":2}', b'{"d":{"x":1}}']


def test_a_failed_rotation_refuses_writes_until_it_succeeds_and_keeps_acked_records(env):
    """A rotation that cannot make its file (a full disk: ENOSPC) refuses the writes that
    need it with `insufficient_storage` and latches nothing; once the disk has room the
    next write rotates, with no restart (issue 34; the reference latches the shard)."""
    h = env.single(file_bytes=4096)
    h.put("f", durable=True)
    acked = 0
    while len(h.wal_files()) == 1:
        acked = h.append("f", rec(b'"%s"' % (b"x" * 200)))["last_seq"]
    h.fs.fail("rename", kind="enospc", always=True)       # every rotation fails
    replies = [h.batch(Append("f", [rec(b'"%s"' % (b"y" * 200))]))[0] for _ in range(30)]
    failed = [r for r in replies if isinstance(r, TopicsError)]
    acked += len(replies) - len(failed)
    assert failed and all(code(r) == "insufficient_storage" for r in failed)
    assert replies.index(failed[0]) + len(failed) == len(replies)   # until space returns
    assert not h.core.wal.writer.latched
    h.fs.clear()
    assert h.append("f", rec(b'"z"'))["first_seq"] == acked + 1   # no restart
    acked += 1
    h.restart(crash=True)
    assert h.get("f")["head_seq"] == acked
    assert h.append("f")["first_seq"] == acked + 1
    h.crash()


def test_rotation_keeps_records_readable(env):
    h = env.single(file_bytes=4096)
    h.put("f", durable=True)
    for i in range(60):
        h.append("f", rec(b'{"i":%d,"pad":"%s"}' % (i, b"x" * 100)))
    assert len(h.wal_files()) > 2
    assert [r[0] for r in h.records("f")] == list(range(1, 61))
    assert h.records("f")[59][2].startswith(b'{"d":{"i":59')
    h.crash()


def test_a_shard_refuses_topics_it_does_not_own(env):
    cluster = env.cluster(3)
    name = next(f"t{i}" for i in range(100) if env.owner(cluster, f"t{i}") is not cluster[0])
    before = env.fs.mutations()
    reply = cluster[0].batch(Append(name, [rec()]))[0]
    assert code(reply) == "not_ready" and reply.detail["reason"] == "wrong_shard"
    assert not cluster[0].exists(name) and env.fs.mutations() == before
    assert env.owner(cluster, name).append(name)["first_seq"] == 1
    for h in cluster:
        h.crash()


# --- idempotency ---------------------------------------------------------------------------

def test_same_key_is_deduped_with_the_original_seqs(shard):
    first = shard.append("t", rec(b"1"), rec(b"2"), idempotency_key="order-7")
    shard.append("t", rec(b"3"))
    again = shard.append("t", rec(b'"other"'), idempotency_key="order-7")
    assert (again["first_seq"], again["last_seq"], again["seqs"], again["deduped"],
            again["count"]) == (1, 2, [1, 2], True, 2)
    assert again["head_seq"] == first["head_seq"] == 2
    assert shard.get("t")["count"] == 3
    other = shard.append("t", rec(), idempotency_key="order-8")
    assert (other["first_seq"], other["deduped"]) == (4, False)


def test_same_key_twice_in_one_batch(shard):
    replies = shard.batch(Append("t", [rec(b"1")], idempotency_key="k"),
                          Append("t", [rec(b"2")], idempotency_key="k"))
    assert (replies[0]["first_seq"], replies[0]["deduped"]) == (1, False)
    assert (replies[1]["first_seq"], replies[1]["deduped"]) == (1, True)
    assert shard.get("t")["count"] == 1


@pytest.mark.parametrize("durable", [False, True])
def test_keys_survive_a_crash(shard, durable):
    shard.put("t", durable=durable)
    shard.append("t", rec(b"1"), rec(b"2"), idempotency_key="user-key")
    shard.append("t", rec(b"3"), idempotency_key="~abc:1")
    shard.append("t", rec(b"4"), idempotency_key="~abc:2")
    shard.restart(crash=True)
    head = shard.get("t")["head_seq"]
    user = shard.append("t", rec(), idempotency_key="user-key")
    assert (user["deduped"], user["first_seq"], user["last_seq"]) == (True, 1, 2)
    session = shard.append("t", rec(), idempotency_key="~abc:1")
    assert (session["deduped"], session["first_seq"]) == (True, 3)
    assert shard.append("t", rec(), idempotency_key="~abc:2")["seqs"] == [4]
    fresh = shard.append("t", rec(), idempotency_key="~abc:3")
    assert (fresh["deduped"], fresh["first_seq"]) == (False, head + 1)


def test_key_expires_after_the_window(env):
    now = [1_000_000]
    h = env.single(clock=lambda: now[0])
    h.put("t", idempotency_window_ms=1000)
    h.append("t", idempotency_key="k")
    now[0] += 999
    assert h.append("t", idempotency_key="k")["deduped"] is True
    now[0] += 2
    reply = h.append("t", idempotency_key="k")
    assert (reply["deduped"], reply["first_seq"]) == (False, 2)
    h.append("t", idempotency_key="k2")
    h.close()
    now[0] += 500
    h.start()                                            # k2 is still inside its window
    assert len(h.core.registry.topics["t"].dedupe) == 2
    assert h.append("t", idempotency_key="k2")["deduped"] is True
    h.close()
    now[0] += 5000
    h.start()                                            # expired keys are not replayed
    assert len(h.core.registry.topics["t"].dedupe) == 0
    assert h.append("t", idempotency_key="k2")["deduped"] is False
    h.crash()


# --- inbox bounds ----------------------------------------------------------------------------

def test_inbox_overflow_answers_throttled(shard, monkeypatch):
    monkeypatch.setattr(batch_stager, "INBOX_REQUESTS_MAX", 3)
    shard.put("t", durable=True)
    replies = shard.batch(*[Append("t", [rec(b"%d" % i)]) for i in range(5)],
                          GetTopic("t"), PutTopic("u", None))
    assert [r["first_seq"] for r in replies[:3]] == [1, 2, 3]
    for reply in (replies[3], replies[4], replies[6]):
        assert code(reply) == "throttled" and reply.retryable
        assert reply.detail == {"retry_after_ms": 1000}
    assert replies[5]["head_seq"] == 3                   # reads are not throttled
    assert not shard.exists("u")
    assert shard.core.stats.throttled == 3
    assert shard.append("t")["first_seq"] == 4           # the next turn has room again
    shard.restart(crash=True)
    assert [r[2] for r in shard.records("t")] == [b'{"d":0}', b'{"d":1}', b'{"d":2}',
                                                  b'{"d":{"x":1}}']


def test_inbox_byte_bound(shard, monkeypatch):
    monkeypatch.setattr(batch_stager, "INBOX_BYTES_MAX", 1000)
    big = rec(b'"' + b"x" * 2000 + b'"')
    replies = shard.batch(Append("t", [big]), Append("t", [rec()]))
    assert replies[0]["first_seq"] == 1
    assert code(replies[1]) == "throttled"
    assert shard.get("t")["count"] == 1


def test_the_real_inbox_limit(shard):
    msgs = [Append("t", [rec()]) for _ in range(INBOX_REQUESTS_MAX + 1)]
    replies = shard.batch(*msgs)
    assert code(replies[-1]) == "throttled"
    assert replies[-2]["first_seq"] == INBOX_REQUESTS_MAX
