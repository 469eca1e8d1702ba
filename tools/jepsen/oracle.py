"""The oracle: what the writers were told and the readers were shown, against every node's
copy of each topic read offline after the run (all faults healed, followers caught up).

Per topic, each a violation when broken:

- **acked**: every write acked with `acks: all` is on every copy at the seq its ack named,
  with its payload (I1);
- **once, in order**: the acks' seqs rise with the writer's order (one writer, one record
  at a time), no seq was acked for two records, and no copy holds an acked record again at
  a seq above its ack (a second copy below it is an earlier attempt of that write whose
  answer was lost to a failover, stored by the old leader before the retry: counted, not a
  violation; docs/CLUSTER.md 4);
- **identical**: the copies hold the same records (I2);
- **nothing invented**: every stored record is one the writer sent;
- **reads stay**: every record a reader was shown (at or below the high watermark) is on
  the copies at that seq with that number.

A topic written with `acks: leader` is checked for what that mode keeps: identical copies,
nothing invented, reads that stay (readers see only what the high watermark covers); acked
records it lost, and seqs issued again after such a loss, are counted, not violations
(docs/CLUSTER.md 4: what a leader acked and no follower had dies with it).

A power loss of every node at once is the one fault `acks: all` does not cover for the
`disk` and `memory` classes (their records are written, not synced, on each replica:
docs/CLUSTER.md 4). For those topics only, a record acked (or shown to a reader) before such
a power loss may be missing, if what is missing is the tail: nothing acked before that
power loss with a higher seq survived. Those are counted as allowed losses. An `fsync`
topic may lose nothing, whatever the fault.

A `memory` topic also takes no head reservations, so after such a power loss it may issue
a lost seq again (docs/DURABILITY.md 3): its acks' seqs must rise, and be unique, only
between two power losses of every node, and a record acked or shown before one may be
replaced at its seq by one acked after it. What stays a violation: a record at another seq
than its ack's, a record never sent, a lost record that is not the tail of what was acked
before that power loss, a record read after the last power loss that changed, copies
that differ.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses

import orjson

SHOWN_MAX = 10        # lines per kind of violation
REISSUES = {"memory"}  # classes that may issue a lost seq again after a power loss


@dataclasses.dataclass
class TopicVerdict:
    durability: str
    acked: int = 0
    lost_allowed: int = 0          # disk/memory records lost to an all-node power loss
    retry_copies: int = 0          # an earlier attempt of an acked write, also stored
    in_doubt: int = 0
    records: int = 0
    reads: int = 0
    lost_leader_acked: int = 0     # acks=leader records no copy holds (allowed)
    violations: list = dataclasses.field(default_factory=list)


def check_topic(durability: str, writer, reader, found: dict,
                power_losses: list[float], acks: str = "all") -> TopicVerdict:
    """`writer`: a LedgerWriter (ack_log, ack_times, sent, in_doubt); `reader`: a Reader
    (seen, changed) or None; `found`: {node id: {seq: envelope} | None}; `power_losses`:
    time.monotonic() of every all-node power loss; `acks`: the writer's mode."""
    verdict = TopicVerdict(durability, len(writer.ack_log), in_doubt=len(writer.in_doubt))
    if acks == "leader":
        return _check_leader_acked(verdict, writer, reader, found)
    problems: dict[str, list[str]] = collections.defaultdict(list)
    losses = power_losses if durability != "fsync" else []
    eras = losses if durability in REISSUES else []     # a lost seq may be issued again
    decoded = {nid: ({seq: _number(env) for seq, env in copy.items()} if copy is not None
                     else None) for nid, copy in found.items()}
    for nid, copy in sorted(decoded.items()):
        if copy is None:
            problems["copy"].append(f"{nid} has no copy")
    copies = {nid: c for nid, c in decoded.items() if c is not None}
    _check_order(writer.ack_log, writer.ack_times, eras, problems)
    newest = _newest_acked_before(writer, eras)
    for nid, copy in sorted(copies.items()):
        verdict.records = max(verdict.records, len(copy))
        lost = _check_acked(nid, copy, writer, losses, newest, problems)
        verdict.lost_allowed = max(verdict.lost_allowed, lost)
        problems["invented"] += [f"{nid}: seq {seq} holds n={n}, never sent"
                                 for seq, n in sorted(copy.items())
                                 if not (isinstance(n, int) and 1 <= n <= writer.sent)]
        verdict.retry_copies = max(verdict.retry_copies,
                                   _check_once(nid, copy, writer.ack_log, problems))
    if len({tuple(sorted(c.items())) for c in copies.values()}) > 1:
        problems["identical"].append(_first_difference(copies))
    if reader is not None:
        verdict.reads = len(reader.seen)
        problems["read"] += _changed_reads(reader.changed, eras, newest)
        _check_reads(copies, reader.seen, losses, newest, problems)
    for kind, lines in problems.items():
        verdict.violations += [f"{kind}: {line}" for line in lines[:SHOWN_MAX]]
        if len(lines) > SHOWN_MAX:
            verdict.violations.append(f"{kind}: ... {len(lines) - SHOWN_MAX} more")
    return verdict


def _check_leader_acked(verdict: TopicVerdict, writer, reader, found: dict) -> TopicVerdict:
    """An `acks: leader` topic: identical copies, nothing invented, reads that stay; its
    acked records that no copy holds are counted."""
    copies = {nid: {seq: _number(env) for seq, env in copy.items()}
              for nid, copy in found.items() if copy is not None}
    problems: dict[str, list[str]] = collections.defaultdict(list)
    problems["copy"] = [f"{nid} has no copy" for nid, copy in found.items() if copy is None]
    if len({tuple(sorted(c.items())) for c in copies.values()}) > 1:
        problems["identical"].append(_first_difference(copies))
    for nid, copy in sorted(copies.items()):
        verdict.records = max(verdict.records, len(copy))
        problems["invented"] += [f"{nid}: seq {seq} holds n={n}, never sent"
                                 for seq, n in sorted(copy.items())
                                 if not (isinstance(n, int) and 1 <= n <= writer.sent)]
    held = set().union(*(set(c.values()) for c in copies.values())) if copies else set()
    verdict.lost_leader_acked = sum(1 for _, number in writer.ack_log if number not in held)
    if reader is not None:
        verdict.reads = len(reader.seen)
        problems["read"] += _changed_reads(reader.changed, [], [])
        _check_reads(copies, reader.seen, [], [], problems)
    for kind, lines in problems.items():
        verdict.violations += [f"{kind}: {line}" for line in lines[:SHOWN_MAX]]
    return verdict


def _number(envelope: bytes):
    data = orjson.loads(envelope).get("d")
    return data.get("n") if isinstance(data, dict) and list(data) == ["n"] else data


def _check_order(ack_log: list, ack_times: list, eras: list[float], problems: dict) -> None:
    """The acks' seqs rise in the writer's order and name one record each, between two of
    `eras` (the power losses after which a lost seq may be issued again)."""
    by_seq: dict[tuple[int, int], set] = collections.defaultdict(set)
    previous, previous_era = 0, 0
    for (seq, number), acked_at in zip(ack_log, ack_times):
        era = bisect.bisect_right(eras, acked_at)
        if era != previous_era:
            previous, previous_era = 0, era
        by_seq[(era, seq)].add(number)
        if seq <= previous:
            problems["order"].append(f"n={number} acked at seq {seq}, after an ack at "
                                     f"seq {previous}")
        previous = max(previous, seq)
    problems["reuse"] += [f"seq {seq} acked for numbers {sorted(numbers)}"
                          for (_, seq), numbers in sorted(by_seq.items()) if len(numbers) > 1]


def _check_acked(nid: str, copy: dict, writer, losses: list[float], newest: list[int],
                 problems: dict) -> int:
    """I1 on one copy; the number of acked records it lacks that an all-node power loss
    excuses: missing, or (a class in REISSUES: `newest` lists its power losses) replaced by
    a record stored after that power loss."""
    excused = collections.defaultdict(list)        # power loss index -> missing seqs
    for (seq, number), acked_at in zip(writer.ack_log, writer.ack_times):
        if copy.get(seq) == number:
            continue
        loss = bisect.bisect_right(losses, acked_at)
        if loss < len(losses) and (seq not in copy or _stored_after(copy[seq], newest, loss)):
            excused[loss].append(seq)
            continue
        problems["acked"].append(f"{nid}: acked seq {seq} (n={number}) holds "
                                 f"{copy.get(seq, 'nothing')}")
    for loss, missing in excused.items():
        at, lowest = losses[loss], min(missing)
        kept = [seq for (seq, number), t in zip(writer.ack_log, writer.ack_times)
                if t <= at and seq > lowest and copy.get(seq) == number]
        if kept:
            problems["tail"].append(f"{nid}: the power loss of every node lost acked seq "
                                    f"{lowest} but kept later acked seq {kept[0]}: not a tail")
    return sum(len(missing) for missing in excused.values())


def _newest_acked_before(writer, eras: list[float]) -> list[int]:
    """Per power loss of `eras`, the highest number acked before it. The writer sends one
    record at a time in rising numbers and moves on only once a write is acked or has
    failed, so a record numbered above it can only have been stored after that loss
    (possibly sent before it, and stored by the client's retry)."""
    return [max((n for (_, n), t in zip(writer.ack_log, writer.ack_times) if t <= at),
                default=0) for at in eras]


def _stored_after(number, newest: list[int], loss: int) -> bool:
    """Whether `number` was stored after power loss `loss` (False where no lost seq may be
    issued again: `newest` is empty)."""
    return loss < len(newest) and isinstance(number, int) and number > newest[loss]


def _check_once(nid: str, copy: dict, ack_log: list, problems: dict) -> int:
    """Acked records stored twice; the earlier attempts' copies (below the ack) counted."""
    where: dict[int, list[int]] = collections.defaultdict(list)
    for seq, number in copy.items():
        where[number].append(seq)
    retries = 0
    for seq, number in ack_log:
        others = [s for s in where.get(number, ()) if s != seq]
        above = [s for s in others if s > seq]
        if above:
            problems["once"].append(f"{nid}: n={number} acked at seq {seq} is stored again "
                                    f"at seq {above[0]}, after its ack")
        retries += len(others) - len(above)
    return retries


def _check_reads(copies: dict, seen: dict, losses: list[float], newest: list[int],
                 problems: dict) -> None:
    """Every record shown is on every copy at its seq, unless a power loss of every node
    came after it was first shown and took it (or, `newest` given, issued its seq again)."""
    for seq, (number, first_at) in sorted(seen.items()):
        for nid, copy in sorted(copies.items()):
            if copy.get(seq) == number:
                continue
            loss = bisect.bisect_right(losses, first_at)
            if not (loss < len(losses) and (
                    seq not in copy or _stored_after(copy[seq], newest, loss))):
                problems["read"].append(f"{nid}: seq {seq} was read as n={number}, the copy "
                                        f"holds {copy.get(seq, 'nothing')}")


def _changed_reads(changed: list, eras: list[float], newest: list[int]) -> list[str]:
    """A seq shown with two numbers; excused only when a power loss of `eras` came between
    the two reads and the second record was stored after it (the seq was issued again)."""
    return [f"seq {seq} read as n={first}, then as n={number} through {nid}"
            for seq, first, first_at, number, at, nid in changed
            if not (bisect.bisect_right(eras, first_at) < bisect.bisect_right(eras, at)
                    and _stored_after(number, newest, bisect.bisect_right(eras, first_at)))]


def _first_difference(copies: dict) -> str:
    for seq in sorted(set().union(*copies.values())):
        held = {nid: copy.get(seq) for nid, copy in copies.items()}
        if len(set(held.values())) > 1:
            shown = ", ".join(f"{nid}={value}" for nid, value in sorted(held.items()))
            sizes = ", ".join(f"{nid} {len(c)} records (max seq {max(c, default=0)})"
                              for nid, c in sorted(copies.items()))
            return f"copies differ first at seq {seq}: {shown}; {sizes}"
    return "copies differ"
