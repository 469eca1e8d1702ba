"""The head table (protocol/head_table.py): a caught-up diff a gateway answers from it
(gateway/head_reads.py) is the reply the shard gives, after every kind of change to the
topic; a slot is read whole or not at all; a new run of the shard voids what gateways
learned before."""

from __future__ import annotations

import pytest

from tools.testing.shard_harness import rec
from topics_actors.errors import TopicsError
from topics_actors.gateway.head_reads import HeadReads
from topics_actors.protocol import head_table
from topics_actors.protocol.head_table import HEADER_WORDS, SLOT_WORDS, HeadTable
from topics_actors.protocol.messages import DeleteRecords, DeleteTopic, Diff, GetTopic

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not head_table.supported(), reason="x86-64 only")]


def table() -> HeadTable:
    found = HeadTable(bytearray(head_table.TABLE_BYTES))
    found.begin()
    return found


def test_a_slot_holds_one_topic_of_one_run():
    heads = table()
    heads.write(3, tid=77, head=10, earliest=4)
    place = (heads.incarnation, 3, 77)
    assert heads.read(place) == (10, 4)
    assert heads.read((heads.incarnation, 3, 78)) is None        # another topic's slot
    assert heads.read((heads.incarnation ^ 2, 3, 77)) is None    # another run's
    heads.write(3, tid=0, head=0, earliest=0)                    # freed
    assert heads.read(place) is None


def test_a_slot_being_written_is_not_read():
    heads = table()
    heads.write(0, tid=5, head=1, earliest=1)
    at = HEADER_WORDS
    heads.words[at] += 1                     # the writer is between its first and last word
    assert heads.read((heads.incarnation, 0, 5)) is None
    heads.write(0, tid=5, head=2, earliest=1)    # a torn seq from a killed run is made whole
    assert heads.words[at] % 2 == 0 and heads.read((heads.incarnation, 0, 5)) == (2, 1)


def test_a_new_run_voids_every_slot_learned_before():
    heads = table()
    heads.write(1, tid=9, head=5, earliest=1)
    place = (heads.incarnation, 1, 9)
    heads.begin()
    assert heads.read(place) is None
    assert heads.words[HEADER_WORDS + SLOT_WORDS + head_table.HEAD] == 5   # not cleared


class Gateway:
    """A gateway's caught-up diffs over a shard harness: from the table when it can."""

    def __init__(self, shard, tmp_path):
        self.shard, self.path = shard, str(tmp_path / "shard-00.heads")
        self.open()
        self.reads = HeadReads(lambda topic: f"ipc://{tmp_path}/shard-00.sock")

    def open(self) -> None:
        self.shard.core.open_heads(self.path)

    def from_table(self, name: str, from_seq: int) -> dict | None:
        page = self.reads.page(name, from_seq)
        if page is not None:
            page.pop("performance")
        return page

    def from_shard(self, name: str, from_seq: int) -> dict:
        reply = self.shard.call(Diff(name, from_seq, head_slot=True))
        self.reads.learn(name, reply)
        reply.pop("performance")
        return reply

    def published_head(self, name: str) -> int | None:
        found = self.reads._places.get(name)
        heads = found and found[0].read(found[1])
        return heads[0] if heads else None

    def agree(self, name: str) -> dict | None:
        """The table's page at its head equals the shard's reply at that cursor; the
        shard's head is then published (the page's head is the shard's)."""
        head = self.published_head(name)
        if head is not None:
            page = self.from_table(name, head)
            reply = self.from_shard(name, head)
            reply.pop("head_slot", None)
            assert page == reply
        reply = self.from_shard(name, self.shard.get(name)["head_seq"])
        if "head_slot" not in reply:
            assert self.published_head(name) is None
            return None
        assert reply["caught_up"] and not reply["records"]
        assert self.published_head(name) == reply["head_seq"]
        return reply


@pytest.fixture
def gateway(shard, tmp_path):
    return Gateway(shard, tmp_path)


def test_appends_deletes_and_caps_publish_what_the_shard_answers(gateway):
    shard = gateway.shard
    shard.put("m", durability="memory")
    shard.put("d", durability="disk", cap_records=3)
    shard.put("f", durability="fsync", cap_records=2)
    shard.put("e", durability="ephemeral")
    for name in "mdfe":
        shard.append(name, rec(), rec(tag="x"), rec())
        assert gateway.agree(name) is not None
    for _ in range(3):
        for name in "mdfe":
            shard.append(name, rec(b'{"y":2}'), rec(tag="x"))
            gateway.agree(name)
    assert shard.get("d")["earliest_seq"] == 7                   # the cap moved it
    shard.call(DeleteRecords("m", before_seq=2))
    gateway.agree("m")
    shard.call(DeleteRecords("m", match="x"))
    assert gateway.agree("m")["earliest_seq"] == 3
    shard.call(DeleteRecords("e", before_seq=12))                # every record
    assert gateway.agree("e")["earliest_seq"] == 10


def test_a_deleted_or_recreated_topic_is_not_read_from_the_table(gateway):
    shard = gateway.shard
    shard.put("t", durability="memory")
    shard.append("t", rec(), rec())
    assert gateway.agree("t")["head_seq"] == 2
    shard.call(DeleteTopic("t"))
    assert gateway.from_table("t", 2) is None
    with pytest.raises(TopicsError):
        gateway.from_shard("t", 2)
    shard.put("t", durability="memory")
    assert gateway.from_table("t", 2) is None and gateway.from_table("t", 0) is None
    shard.append("t", rec())
    assert gateway.agree("t")["head_seq"] == 1


def test_topics_a_head_cannot_answer_hold_no_slot(gateway):
    shard = gateway.shard
    shard.put("q", type="queue", durability="memory")
    shard.put("ttl", durability="memory", ttl_ms=60_000)
    shard.put("bytes", durability="memory", cap_bytes=20)
    shard.put("later", durability="memory")
    for name in ("q", "ttl", "bytes", "later"):
        shard.append(name, rec(), rec(), rec())
    for name in ("q", "ttl", "bytes"):
        assert gateway.agree(name) is None
    assert gateway.agree("later") is not None
    shard.put("later", durability="memory", ttl_ms=60_000)      # a TTL now: the slot goes
    assert gateway.from_table("later", 1) is None
    assert gateway.agree("later") is None


def test_a_checkpoint_and_a_restart_keep_the_table_true(env, gateway):
    shard = gateway.shard
    shard.put("c", durability="disk", cap_records=4)
    for _ in range(3):
        shard.append("c", rec(), rec(), rec())
    gateway.agree("c")
    env.checkpoint([shard])
    gateway.agree("c")
    before = gateway.agree("c")["head_seq"]
    shard.restart(crash=False)
    gateway.open()
    assert gateway.from_table("c", before) is None               # learned in the last run
    assert gateway.agree("c")["head_seq"] == before


def test_a_read_from_the_table_counts_as_a_read_of_the_topic(gateway):
    shard = gateway.shard
    shard.put("r", durability="memory")
    shard.append("r", rec())
    gateway.agree("r")
    shard.core.registry.get("r").last_read_ts = 1
    assert gateway.from_table("r", 1) is not None
    assert shard.call(GetTopic("r", touch=False))["last_read_ts"] > 1


def test_a_shard_without_room_for_its_table_serves_every_read_itself(shard, tmp_path):
    shard.core.open_heads(str(tmp_path / "missing-dir" / "shard-00.heads"))
    assert shard.core.heads is None
    shard.put("t", durability="memory")
    shard.append("t", rec())
    reply = shard.call(Diff("t", 1, head_slot=True))
    assert reply["caught_up"] and "head_slot" not in reply
