"""Pieces shared by the replication tests and the cluster crash tool: a node's cluster
settings, a topic's replication view through a node, and a writer that remembers exactly
which records were acknowledged (the oracle: every one must survive)."""

from __future__ import annotations

import collections
import itertools
import threading
import time

import orjson

from tools.testing.node_harness import wait_for
from tools.testing.replica_copy import topic_copy
from topics_actors.errors import ErrorCode, TopicsError


def cluster_env(zk_connect: str, node_id: str, session_ms: int = 1000, **extra) -> dict:
    return {"TOPICS_ZK": zk_connect, "TOPICS_NODE_ID": node_id,
            "TOPICS_ZK_SESSION_TIMEOUT_MS": str(session_ms), "TOPICS_GATEWAY_WORKERS": "1",
            **extra}


def replication(node, topic: str) -> dict | None:
    """The topic's `replication` member as `node` answers it (None: no answer)."""
    try:
        reply = node.http("GET", f"/v0/topics/{topic}")
    except OSError:
        return None
    return reply.json().get("replication") if reply.status == 200 else None


def wait_isr(node, topic: str, size: int, timeout_s: float = 30) -> dict:
    return wait_for(lambda: (r := replication(node, topic)) and len(r["isr"]) == size and r,
                    timeout_s, f"an ISR of {size}")


def wait_caught_up(node, topic: str, timeout_s: float = 60) -> dict:
    """Until the leader (through `node`) sees every follower at its log end."""
    return wait_for(lambda: (r := replication(node, topic)) and r.get("followers") is not None
                    and all(f["lag"] == 0 for f in r["followers"].values()) and r,
                    timeout_s, "followers caught up")


def copies(nodes: dict, shards: int, topic: str) -> dict:
    """Each stopped node's copy of `topic` ({seq: envelope}, None: no copy), by node id."""
    return {nid: topic_copy(node.data_dir, shards, topic) for nid, node in nodes.items()}


def converged(nodes: dict, shards: int, topic: str,
              acked: dict[int, int] | None = None) -> dict:
    """Stop the nodes and read each one's copy of `topic`; assert the copies are identical
    (I2) and hold every acked record ({seq: number}, a Writer's) at its seq (I1). Returns
    one copy ({seq: envelope})."""
    for node in nodes.values():
        node.stop()
    found = copies(nodes, shards, topic)
    first, *rest = found.values()
    assert first is not None and all(copy == first for copy in rest), "the copies differ"
    for seq, number in (acked or {}).items():
        assert seq in first and orjson.loads(first[seq])["d"] == {"n": number}, (
            f"acked seq {seq} (n={number}) is not on the copies")
    return first


class Writer(threading.Thread):
    """Appends numbered records with `acks` until halted; remembers what was acked
    ({seq: number}); a failed append is not acked (it may or may not be stored)."""

    def __init__(self, node, topic: str, acks: str = "all", **client_options):
        super().__init__(daemon=True)
        client_options.setdefault("request_timeout_ms", 2000)
        client_options.setdefault("retry_deadline_ms", 20_000)
        self.client = node.client(**client_options)
        self.topic, self.acks = topic, acks
        self.acked: dict[int, int] = {}
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.halt.is_set():
            number += 1
            try:
                reply = self.client.append(self.topic, [{"data": {"n": number}}],
                                           acks=self.acks)
            except TopicsError:
                self.failures += 1
                continue
            self.acked[reply["first_seq"]] = number

    def stop(self, timeout_s: float = 30) -> None:
        self.halt.set()
        self.join(timeout_s)


# --- Added for tools/cluster_crashtest: a writer with a full ack ledger, the cluster's
# --- health as every node sees it, and the acked-writes oracle over the stopped copies.

class LedgerWriter(Writer):
    """A Writer that also keeps every ack in order (`ack_log`: [(seq, number)], so a seq acked
    for two numbers shows, which `acked` would hide), the numbers whose append failed
    (`in_doubt`: refused, timed out or cut by a failover; each may or may not be stored),
    the failures by error code, and how many numbers it sent (`sent`)."""

    def __init__(self, node, topic: str, acks: str = "all", **client_options):
        super().__init__(node, topic, acks, **client_options)
        self.ack_log: list[tuple[int, int]] = []
        self.ack_times: list[float] = []    # time.monotonic() of each ack in ack_log
        self.in_doubt: list[int] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.sent = 0
        self.numbered_from = 0              # the first record is numbered one above this
        self.last_ack_s = 0.0               # time.monotonic() of the latest ack

    def run(self) -> None:
        number = self.numbered_from
        while not self.halt.is_set():
            number += 1
            self.sent = number
            try:
                reply = self.client.append(self.topic, [{"data": {"n": number}}],
                                           acks=self.acks)
            except TopicsError as error:
                self._failed(number, error.code.wire)
                continue
            except Exception as error:      # not the client's contract: count it, go on
                self._failed(number, type(error).__name__)
                time.sleep(0.1)
                continue
            self.last_ack_s = time.monotonic()
            self.ack_log.append((reply["first_seq"], number))
            self.ack_times.append(self.last_ack_s)
            self.acked[reply["first_seq"]] = number

    def _failed(self, number: int, code: str) -> None:
        self.failures += 1
        self.in_doubt.append(number)
        self.errors[code] += 1


class OnceWriter(Writer):
    """Appends the numbers 1, 2, ... from `threads` threads, each number until it is acked
    (docs/CLUSTER.md 4): after `outcome_unknown` again with the key the error names (a
    stored write is answered with its original seqs), after any other error anew (nothing
    was stored). So a copy holds every acked number once and nothing else, save the numbers
    still being retried when halted (`open`). `deduped` counts the retries answered with
    original seqs, `unknown` the outcome_unknown errors."""

    def __init__(self, node, topic: str, acks: str = "all", threads: int = 4,
                 **client_options):
        super().__init__(node, topic, acks, **client_options)
        self.clients = [self.client] + [node.client(**client_options)
                                        for _ in range(threads - 1)]
        self.numbers = itertools.count(1)
        self.open: set[int] = set()
        self.deduped = self.unknown = 0
        self.lock = threading.Lock()

    def run(self) -> None:
        workers = [threading.Thread(target=self._write, args=(c,), daemon=True)
                   for c in self.clients]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    def _write(self, client) -> None:
        while not self.halt.is_set():
            with self.lock:
                number = next(self.numbers)
                self.open.add(number)
            key = None
            while not self.halt.is_set():
                try:
                    reply = client.append(self.topic, [{"data": {"n": number}}],
                                          acks=self.acks, idempotency_key=key)
                except TopicsError as error:
                    with self.lock:
                        self.failures += 1
                        if error.code is ErrorCode.OUTCOME_UNKNOWN:
                            key, self.unknown = error.detail["idempotency_key"], self.unknown + 1
                    continue
                with self.lock:
                    self.acked[reply["first_seq"]] = number
                    self.deduped += bool(reply.get("deduped"))
                    self.open.discard(number)
                break


def once_violations(copy: dict, writer: OnceWriter) -> list[str]:
    """What breaks exactly-once in a converged copy ({seq: envelope}) of a OnceWriter's
    topic: a number stored twice, an acked number not at its acked seq, or a number stored
    that was neither acked nor still open."""
    seen: dict[int, int] = {}
    problems = []
    for seq, envelope in sorted(copy.items()):
        number = orjson.loads(envelope)["d"]["n"]
        if number in seen:
            problems.append(f"number {number} at seqs {seen[number]} and {seq}")
        seen[number] = seq
    problems += [f"acked number {n} not at seq {seq}" for seq, n in writer.acked.items()
                 if seen.get(n) != seq]
    acked = set(writer.acked.values())
    problems += [f"number {n} at seq {seq} was never acked" for n, seq in seen.items()
                 if n not in acked and n not in writer.open]
    return problems


def read_numbers(client, topic: str) -> tuple[dict[int, int], int]:
    """({seq: number} of a Writer's records, head) of the whole topic, read with diff."""
    found, cursor = {}, 0
    while True:
        reply = client.diff(topic, from_seq=cursor, limit=1000)
        found.update({r["$seq"]: r["data"].get("n") for r in reply["records"]})
        if reply["caught_up"] or reply["next_from_seq"] == cursor:
            return found, reply["head_seq"]
        cursor = reply["next_from_seq"]


def cluster_view(node, timeout_s: float = 2) -> dict | None:
    """GET /v0/cluster of `node` (None: no answer)."""
    try:
        reply = node.http("GET", "/v0/cluster", timeout_s=timeout_s)
    except (OSError, KeyError):
        return None
    return reply.json() if reply.status == 200 else None


def cluster_unhealed(nodes: dict, topics: list[str], timeout_s: float = 2) -> str | None:
    """None when every node is ready, connected to ZooKeeper and sees every node registered
    and every topic led with its whole ISR (the same leader and epoch on every node); else
    the first thing missing, for a report."""
    leaders: dict[str, set] = collections.defaultdict(set)
    for nid, node in nodes.items():
        try:
            ready = node.http("GET", "/v0/ready", timeout_s=timeout_s)
        except (OSError, KeyError):
            return f"{nid}: no answer"
        if ready.status != 200:
            return f"{nid}: not ready ({ready.status})"
        view = cluster_view(node, timeout_s)
        if view is None or view.get("session") != "connected":
            return f"{nid}: ZooKeeper session {view and view.get('session')}"
        if sorted(view["nodes"]) != sorted(nodes):
            return f"{nid} sees nodes {sorted(view['nodes'])}"
        for topic in topics:
            state = view["topics"].get(topic)
            if state is None or state["leader"] is None:
                return f"{nid}: {topic} has no leader"
            if sorted(state["isr"]) != sorted(state["replicas"]):
                return f"{nid}: {topic} isr {state['isr']} of {state['replicas']}"
            leaders[topic].add((state["leader"], state["leader_epoch"]))
    split = [f"{t}: {sorted(seen)}" for t, seen in leaders.items() if len(seen) > 1]
    return f"nodes disagree on the leader: {'; '.join(split)}" if split else None


def wait_unregistered(nodes: dict, gone: str, timeout_s: float = 30) -> None:
    """Until a node other than `gone` answers and no longer lists `gone` (its ZooKeeper
    session ended)."""
    def unlisted():
        views = [cluster_view(node) for nid, node in nodes.items() if nid != gone]
        return any(view is not None and view.get("session") == "connected"
                   and gone not in view["nodes"] for view in views)
    wait_for(unlisted, timeout_s, f"the registration of {gone} to end", interval_s=0.1)


def acked_violations(found: dict, ack_log: list[tuple[int, int]], sent: int,
                     shown_max: int = 10) -> list[str]:
    """The oracle over the stopped nodes' copies of one topic written by a LedgerWriter
    (`found`: topic_copy by node id): no seq acked for two numbers (seqs never reused); every
    acked record at its seq with its payload on every copy (I1); every copy identical (I2);
    no record that the writer never sent. At most `shown_max` lines per kind."""
    problems: dict[str, list[str]] = collections.defaultdict(list)
    by_seq: dict[int, set] = collections.defaultdict(set)
    for seq, number in ack_log:
        by_seq[seq].add(number)
    for seq, numbers in sorted(by_seq.items()):
        if len(numbers) > 1:
            problems["reuse"].append(f"seq {seq} acked for numbers {sorted(numbers)}")
    for nid, copy in sorted(found.items()):
        if copy is None:
            problems["copy"].append(f"{nid} has no copy")
            continue
        decoded = {seq: orjson.loads(envelope).get("d") for seq, envelope in copy.items()}
        for seq, number in ack_log:
            if decoded.get(seq) != {"n": number}:
                problems["I1"].append(f"{nid}: acked seq {seq} (n={number}) holds "
                                      f"{decoded.get(seq, 'nothing')}")
        problems["sent"] += [f"{nid}: seq {seq} holds {data}, never sent" for seq, data
                             in sorted(decoded.items()) if not _sent(data, sent)]
    copies = {nid: copy for nid, copy in found.items() if copy is not None}
    if len(set(map(_digest, copies.values()))) > 1:
        problems["I2"].append(_first_difference(copies))
    lines = []
    for kind, found_lines in problems.items():
        lines += [f"{kind}: {line}" for line in found_lines[:shown_max]]
        if len(found_lines) > shown_max:
            lines.append(f"{kind}: ... {len(found_lines) - shown_max} more")
    return lines


def _sent(data, sent: int) -> bool:
    return (isinstance(data, dict) and list(data) == ["n"] and isinstance(data["n"], int)
            and 1 <= data["n"] <= sent)


def _digest(copy: dict) -> tuple:
    return tuple(sorted(copy.items()))


def _first_difference(copies: dict) -> str:
    seqs = sorted(set().union(*copies.values()))
    for seq in seqs:
        held = {nid: copy.get(seq) for nid, copy in copies.items()}
        if len(set(held.values())) > 1:
            shown = ", ".join(f"{nid}={value!r}" for nid, value in sorted(held.items()))
            sizes = ", ".join(f"{nid} {len(c)} records (max seq {max(c, default=0)})"
                              for nid, c in sorted(copies.items()))
            return f"copies differ first at seq {seq}: {shown}; {sizes}"
    return "copies differ"
