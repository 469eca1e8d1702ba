"""The idempotency index of one topic (ledger/dedupe_index.py): user keys for their window,
session keys in compact rings of each session's newest keys.

| id | what |
|---|---|
| DD-1 | a retried session key gets its first write's seqs; another key of the session does not |
| DD-2 | a ring keeps at least the newest SESSION_RING_MAX keys and forgets older ones |
| DD-3 | keys that arrive out of order, or again, are found with their latest seqs |
| DD-4 | a `~` key that is not `~<session>:<plain decimal>` is a user key, kept for the window |
| DD-5 | a session idle for longer than the window goes when another session comes |
| DD-6 | items() is what a snapshot stores; adding it back gives the same index |
| DD-7 | drop_after forgets keys past a seq; put_back restores them |
| DD-8 | a session ring's snapshot row (u64 columns) restores it; an idle one is not restored; a
  malformed row is corruption |
| DD-9 | a topic's snapshot entry carries user keys as rows and sessions as columns, and an
  entry of an older snapshot (session keys as rows) restores the same index |
| DD-10 | a ring rebases, or widens, the columns a key does not fit (11 bytes a key otherwise) |
| DD-11 | a ring forgets its keys older than the window, in cuts of SESSION_RING_SLACK, never
  one younger |
| DD-12 | a restored ring keeps every key for at least the window after its newest |
| DD-13 | against a model (random numbers, times, removals): every key among the newest
  SESSION_RING_MAX and inside the window is found with its seqs, and nothing else is |
"""

from __future__ import annotations

import random

import pytest

from topics_actors.errors import CorruptionError
from topics_actors.ledger.dedupe_index import (
    SESSION_RING_MAX, SESSION_RING_SLACK, DedupeEntry, DedupeIndex, SessionRing, session_key,
)
from topics_actors.ledger.topic_ledger import TopicLedger, snapshot_entry
from topics_actors.ledger.topic_state import TopicState
from topics_actors.topic_config import TopicConfig

WINDOW_MS = 60_000

pytestmark = pytest.mark.timeout(30)


def _entry(first: int, last: int, ms: int = 1_000) -> DedupeEntry:
    return DedupeEntry(first, last, 0, ms)


def test_a_retried_session_key_gets_its_first_writes_seqs():   # DD-1
    index = DedupeIndex()
    index.add("~ab12:7", _entry(10, 19), WINDOW_MS)
    found = index.lookup("~ab12:7", 2_000, WINDOW_MS)
    assert (found.first_seq, found.last_seq) == (10, 19)
    assert found.reply("t", True)["seqs"] == list(range(10, 20))
    assert found.reply("t", False)["head_seq"] == 19
    assert index.lookup("~ab12:8", 2_000, WINDOW_MS) is None
    assert index.lookup("~other:7", 2_000, WINDOW_MS) is None
    assert len(index) == 1 and not index.user


def test_a_ring_keeps_the_newest_keys_of_its_session():   # DD-2
    index = DedupeIndex()
    total = SESSION_RING_MAX + SESSION_RING_SLACK + 1
    for n in range(1, total + 1):
        index.add(f"~s:{n}", _entry(n, n), WINDOW_MS)
    kept = [n for n in range(1, total + 1) if index.lookup(f"~s:{n}", 1_000, WINDOW_MS)]
    assert kept == list(range(total - SESSION_RING_MAX + 1, total + 1))
    for n in range(total + 1, total + 2 * SESSION_RING_MAX):
        index.add(f"~s:{n}", _entry(n, n + 2), WINDOW_MS)
        assert SESSION_RING_MAX <= len(index) <= SESSION_RING_MAX + SESSION_RING_SLACK
        oldest = index.lookup(f"~s:{n - SESSION_RING_MAX + 1}", 1_000, WINDOW_MS)
        assert oldest.first_seq == n - SESSION_RING_MAX + 1
    assert all(entry.first_seq == int(key.split(":")[1]) for key, entry in index.items())
    ring = index.sessions["~s"]
    assert len(ring.numbers) == len(ring.firsts) == len(ring.counts)


def test_keys_out_of_order_or_again_are_found():   # DD-3
    index = DedupeIndex()
    for n in (5, 9, 7, 1):
        index.add(f"~s:{n}", _entry(n * 10, n * 10 + 1), WINDOW_MS)
    index.add("~s:7", _entry(700, 701), WINDOW_MS)     # a replayed frame writes it again
    assert [index.lookup(f"~s:{n}", 1_000, WINDOW_MS).first_seq for n in (1, 5, 7, 9)] == [
        10, 50, 700, 90]
    assert len(index) == 4


@pytest.mark.parametrize("key", ["~abc", "~abc:", "~abc:x1", "~abc:007", "~abc:-1",
                                 "~abc:1e3", "~abc:²", "~abc:" + "9" * 20])
def test_a_tilde_key_without_a_plain_number_is_a_user_key(key):   # DD-4
    assert session_key(key) is None
    index = DedupeIndex()
    index.add(key, _entry(1, 1, ms=1_000), WINDOW_MS)
    assert list(index.user) == [key] and not index.sessions
    assert index.lookup(key, 1_000 + WINDOW_MS, WINDOW_MS) is not None
    assert index.lookup(key, 1_001 + WINDOW_MS, WINDOW_MS) is None


def test_plain_numbers_are_session_keys():
    assert session_key("~abc:0") == ("~abc", 0)
    assert session_key("~abc:" + "9" * 19) == ("~abc", 10 ** 19 - 1)
    assert session_key("abc:1") is None


def test_an_idle_session_goes_when_another_comes():   # DD-5
    index = DedupeIndex()
    index.add("~old:1", _entry(1, 1, ms=1_000), WINDOW_MS)
    index.add("~old:2", _entry(2, 2, ms=5_000), WINDOW_MS)
    index.add("~new:1", _entry(3, 3, ms=5_000 + WINDOW_MS), WINDOW_MS)
    assert set(index.sessions) == {"~old", "~new"}     # its newest key is still in window
    index.add("~third:1", _entry(4, 4, ms=5_001 + WINDOW_MS), WINDOW_MS)
    assert set(index.sessions) == {"~new", "~third"}
    index.expire(5_002 + 2 * WINDOW_MS, WINDOW_MS)
    assert not index.sessions


def test_items_round_trip_through_a_snapshot():   # DD-6
    index = DedupeIndex()
    index.add("user-1", DedupeEntry(1, 3, 3, 1_000), WINDOW_MS)
    index.add("~a:4", _entry(4, 4), WINDOW_MS)
    index.add("~a:2", _entry(5, 6), WINDOW_MS)
    index.add("~b:1", _entry(7, 9), WINDOW_MS)
    rows = [[key, e.first_seq, e.last_seq, e.head_seq, e.created_ms] for key, e in index.items()]
    assert [row[0] for row in rows] == ["user-1", "~a:2", "~a:4", "~b:1"]
    again = DedupeIndex()
    for key, first, last, head, ms in rows:
        again.add(key, DedupeEntry(first, last, head, ms), WINDOW_MS)
    assert list(again.items()) == list(index.items())


def test_drop_after_and_put_back():   # DD-7
    index = DedupeIndex()
    index.add("low", _entry(1, 2), WINDOW_MS)
    index.add("high", _entry(8, 9), WINDOW_MS)
    index.add("~s:1", _entry(3, 4), WINDOW_MS)
    index.add("~s:2", _entry(5, 8), WINDOW_MS)
    index.add("~t:1", _entry(9, 9), WINDOW_MS)
    before = sorted(index.items())
    gone = index.drop_after(7)
    assert sorted(key for key, _ in gone) == ["high", "~s:2", "~t:1"]
    assert sorted(key for key, _ in index.items()) == ["low", "~s:1"]
    assert set(index.sessions) == {"~s"}
    index.discard("~s:1")
    index.discard("~s:1")                       # twice is harmless
    assert not index.sessions
    index.add("~s:1", _entry(3, 4), WINDOW_MS)
    index.put_back(gone)
    assert sorted(index.items()) == before


def test_a_session_rings_snapshot_row_restores_it():   # DD-8
    index = DedupeIndex()
    for n in (3, 1, 2 ** 63 + 5):
        index.add(f"~s:{n}", _entry(n % 100, n % 100 + 1, ms=4_000 + n % 7), WINDOW_MS)
    index.add("~t:1", _entry(1, 1, ms=100), WINDOW_MS)
    rows = index.session_rows()
    assert [row[0] for row in rows] == ["~s", "~t"]
    assert [len(column) for column in rows[0][1:4]] == [8 * 3, 8 * 3, 4 * 3]
    assert rows[0][4] == 4_000 + max(n % 7 for n in (3, 1, 2 ** 63 + 5))
    again = DedupeIndex()
    for row in rows:
        again.take_row(tuple(row), 100 + WINDOW_MS + 1, WINDOW_MS)   # ~t is idle by then
    assert list(again.items()) == [(k, e) for k, e in index.items() if k.startswith("~s")]
    u64 = b"\0" * 8
    for bad in (["~s", u64, u64, u64], ["~s", u64, u64 * 2, u64, u64],
                ["~s", b"\0" * 7] * 1 + [b"\0" * 7] * 3, ["~s", u64, u64, b"\0" * 8, 5],
                ["~s", u64, u64, b"\0" * 3, 5],
                ["~s", (9).to_bytes(8, "little") + (4).to_bytes(8, "little"), u64 * 2,
                 b"\1\0\0\0" * 2, 5]):                       # numbers not ascending
        with pytest.raises(CorruptionError):
            SessionRing.from_row(bad)


def test_a_ring_of_the_first_snapshot_form_restores():
    """Snapshots written before rings kept counts: four u64 columns (numbers, first seqs,
    last seqs, created ms)."""
    def u64s(*values):
        return b"".join(v.to_bytes(8, "little") for v in values)
    _session, ring = SessionRing.from_row(("~s", u64s(4, 9), u64s(10, 20), u64s(12, 20),
                                           u64s(1_000, 3_000)))
    assert [(n, e.first_seq, e.last_seq) for n, e in ring.items()] == [(4, 10, 12),
                                                                       (9, 20, 20)]
    assert ring.newest_ms == 3_000


def test_a_topic_entry_keeps_its_keys_and_reads_the_older_form():   # DD-9
    topic = TopicState("t", TopicConfig())
    topic.dedupe.add("user-1", DedupeEntry(1, 2, 2, 1_000), WINDOW_MS)
    topic.dedupe.add("~s:7", _entry(3, 4), WINDOW_MS)
    entry = snapshot_entry(topic, "", [], 1_500)
    assert entry["dedupe"] == [["user-1", 1, 2, 2, 1_000]]
    assert [row[0] for row in entry["sessions"]] == ["~s"]
    older = dict(entry, dedupe=[["user-1", 1, 2, 2, 1_000], ["~s:7", 3, 4, 0, 1_000]])
    del older["sessions"]
    for form in (entry, older):
        ledger = TopicLedger(2_000)
        restored = ledger.restore_entry(dict(form, config=TopicConfig().to_bytes()), "")
        assert list(restored.dedupe.items()) == list(topic.dedupe.items())


def test_a_ring_widens_what_does_not_fit():
    """Key numbers 4 G apart, seqs beyond u32 offsets and a batch of 70 000 records still
    come back exact, through the snapshot form too."""
    index = DedupeIndex()
    keys = [(5, 10, 10), (6, 11, 80_010), (2 ** 40, 2 ** 35, 2 ** 35), (2 ** 40 + 1, 3, 3)]
    for number, first, last in keys:
        index.add(f"~s:{number}", _entry(first, last), WINDOW_MS)
    want = [(f"~s:{n}", first, last) for n, first, last in sorted(keys)]
    got = [(key, e.first_seq, e.last_seq) for key, e in index.items()]
    assert got == want
    again = DedupeIndex()
    for row in index.session_rows():
        again.take_row(row, 1_000, WINDOW_MS)
    assert [(key, e.first_seq, e.last_seq) for key, e in again.items()] == want
    assert again.sessions["~s"].numbers.typecode == "Q"
    small = DedupeIndex()
    small.add("~s:7", _entry(3, 4), WINDOW_MS)
    ring = small.sessions["~s"]
    sizes = (ring.numbers.itemsize, ring.firsts.itemsize, ring.counts.itemsize,
             ring.times.itemsize)
    assert sizes == (4, 4, 1, 2)


def test_a_ring_rebases_before_it_widens():   # DD-10
    """Numbers, seqs and times far from the first key's fit again once the keys near it
    are gone: the column is rebased, not widened."""
    ring = SessionRing()
    ring.put(1, _entry(1, 1, ms=1_000))
    ring.remove(1)
    far = (2 ** 40, 2 ** 36, 2 ** 36 + 300, 1_000 + 3_600_000 * 24 * 30)   # a month on
    ring.put(far[0], _entry(far[1], far[2], ms=far[3]))
    ring.put(far[0] + 1, _entry(far[2] + 1, far[2] + 1, ms=far[3] + 1))
    assert [c.typecode for c in (ring.numbers, ring.firsts, ring.counts, ring.times)] == [
        "I", "I", "H", "H"]
    assert [(n, e.first_seq, e.last_seq) for n, e in ring.items()] == [
        (far[0], far[1], far[2]), (far[0] + 1, far[2] + 1, far[2] + 1)]
    ring.put(3, _entry(5, 5, ms=far[3] + 2))          # an old number, retried: widened
    assert ring.numbers.typecode == "Q" and ring.get(3).first_seq == 5
    assert ring.get(far[0]).last_seq == far[2]


def test_a_key_out_of_order_that_does_not_fit_widens_its_column():   # DD-10
    """A retried (older) key whose batch is too large for the counts column as it is:
    the columns stay aligned, the column is widened, every key comes back exact."""
    ring = SessionRing()
    for number in (10, 20, 30):
        ring.put(number, _entry(number * 100, number * 100 + 9))
    ring.put(15, _entry(5_000, 5_000 + 299))
    assert len(ring.numbers) == len(ring.firsts) == len(ring.counts) == len(ring.times) == 4
    assert ring.counts.typecode == "H"
    assert [(n, e.first_seq, e.last_seq) for n, e in ring.items()] == [
        (10, 1_000, 1_009), (15, 5_000, 5_299), (20, 2_000, 2_009), (30, 3_000, 3_009)]


def _times_kept(ring: SessionRing) -> list[int]:
    return [n for n, _ in ring.items()]


def test_a_ring_forgets_keys_older_than_the_window():   # DD-11
    """One key a second: a ring holds the window's keys and at most SESSION_RING_SLACK
    more (fewer older ones than that, and one second more for the rounding of times), and
    finds every key younger than the window."""
    window_ms, step_ms = 20_000, 1_000
    ring = SessionRing()
    for n in range(1, 400):
        now = n * step_ms + 137
        ring.put(n, _entry(10 * n, 10 * n + 9, ms=now), window_ms)
        young = [k for k in range(1, n + 1) if now - (k * step_ms + 137) <= window_ms]
        kept = _times_kept(ring)
        assert set(young) <= set(kept)
        assert len(kept) <= len(young) + SESSION_RING_SLACK
    assert len(_times_kept(ring)) < SESSION_RING_MAX
    index = DedupeIndex()
    for n in range(1, 200):
        index.add(f"~s:{n}", _entry(n, n, ms=n * step_ms), window_ms)
    index.expire(200 * step_ms + window_ms + 1, window_ms)   # the session idle: ring gone
    assert not index.sessions


def test_a_restored_ring_keeps_its_keys_for_the_window():   # DD-12
    index = DedupeIndex()
    for n in range(1, 101):
        index.add(f"~s:{n}", _entry(n, n, ms=90_000 + n * 100), WINDOW_MS)
    again = DedupeIndex()
    again.take_row(index.session_rows()[0], 100_000, WINDOW_MS)
    restored = again.sessions["~s"]
    for n in range(101, 101 + 2 * SESSION_RING_SLACK):      # the session goes on
        again.add(f"~s:{n}", _entry(n, n, ms=100_000 + WINDOW_MS), WINDOW_MS)
    assert all(again.lookup(f"~s:{n}", 0, WINDOW_MS) for n in range(1, 101))
    for n in range(200, 200 + 2 * SESSION_RING_SLACK):      # past the newest's window
        again.add(f"~s:{n}", _entry(n, n, ms=100_001 + 2 * WINDOW_MS), WINDOW_MS)
    assert not any(again.lookup(f"~s:{n}", 0, WINDOW_MS) for n in range(1, 101))
    assert restored is again.sessions["~s"]


@pytest.mark.parametrize("seed", range(6))
def test_a_ring_against_a_model(seed):   # DD-13
    rng = random.Random(seed)
    window_ms = rng.choice((5_000, 60_000))
    index = DedupeIndex()
    model, numbers = {}, set()      # number -> (first, last, ms); every number ever put
    now, number, seq = 1_000, 0, 1
    for _ in range(3_000):
        now += rng.choice((0, 1, 7, 150, 999, 1_001, 4_000))
        if rng.random() < 0.05 and model:
            gone = rng.choice(sorted(model))
            index.discard(f"~s:{gone}")
            del model[gone]
            continue
        number += rng.choice((1, 1, 1, 2, 200))
        key_number = number if rng.random() > 0.05 else max(1, number - rng.randrange(300))
        count = rng.choice((1, 10, 300, 70_000))
        entry = DedupeEntry(seq, seq + count - 1, 0, now)
        seq += count
        index.add(f"~s:{key_number}", entry, window_ms)
        model[key_number] = (entry.first_seq, entry.last_seq, now)
        numbers.add(key_number)
        newest = [n for n in sorted(numbers)[-SESSION_RING_MAX:] if n in model]
        for n in newest[-40:] + rng.sample(newest, min(20, len(newest))):
            first, last, ms = model[n]
            found = index.lookup(f"~s:{n}", now, window_ms)
            if now - ms <= window_ms:
                assert found is not None
            if found is not None:
                assert (found.first_seq, found.last_seq) == (first, last)
        ring = index.sessions.get("~s")
        assert ring is None or all(n in model for n, _ in ring.items())
