"""How long a node takes to stop (issue 19): SIGTERM to the supervisor's exit, for an idle
node, one with a 20 s long poll parked in its gateway, and one whose children are all
SIGSTOPped (so none acts on SIGTERM: the worst case, bounded by TOPICS_STOP_GRACE_MS).

    python3 -m tools.bench.stop_bench [--grace-ms 10000] [--rounds 3]

Each round starts a fresh 2-shard node (tools/testing/node_harness.py) in a temp dir and
prints one line per case: seconds to stop, and what the long poll's client got.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import threading
import time

from tools.testing.node_harness import Node, wait_for


def _parked_poll(node: Node) -> list:
    """A diff with wait_ms 20000 on a caught-up topic, parked before this returns."""
    node.http("POST", "/v0/topics/polled", {"records": [{"data": 1}]})
    answers: list = []

    def poll():
        try:
            reply = node.http("POST", "/v0/topics/polled/diff",
                              {"from_seq": 1, "wait_ms": 20000}, timeout_s=40)
            answers.append(f"{reply.status} caught_up={reply.json()['caught_up']}")
        except OSError as error:
            answers.append(f"no reply ({type(error).__name__})")
    threading.Thread(target=poll, daemon=True).start()
    client = node.client()
    wait_for(lambda: sum(s["long_polls"] for s in client.shard_statuses()) == 1, 10,
             "the diff to park")
    return answers


def stop_once(case: str, grace_ms: int) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as base:
        node = Node(f"{base}/data", 2, {"TOPICS_STOP_GRACE_MS": str(grace_ms),
                                        "TOPICS_HEARTBEAT_TIMEOUT_MS": "120000"})
        node.start()
        try:
            answers = _parked_poll(node) if case == "long_poll" else []
            if case == "sigstopped":
                wait_for(lambda: all(p["state"] == "ready"
                                     for p in node.status()["processes"]), 30, "children")
                for child in node.children():
                    child.send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            node.proc.send_signal(signal.SIGTERM)
            node.proc.wait(grace_ms / 1000 * 4 + 30)
            took_s = time.monotonic() - t0
            if case == "long_poll":
                wait_for(lambda: answers, 30, "the long poll's answer")
            return took_s, answers[0] if answers else ""
        finally:
            node.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace-ms", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="idle,long_poll,sigstopped")
    args = parser.parse_args(argv)
    for case in args.cases.split(","):
        runs = [stop_once(case, args.grace_ms) for _ in range(args.rounds)]
        seconds = [s for s, _ in runs]
        print(f"{case:11s} grace_ms={args.grace_ms} stop_s median={statistics.median(seconds):.2f}"
              f" max={max(seconds):.2f} client={runs[-1][1] or '-'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
