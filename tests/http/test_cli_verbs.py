"""The `topics` verbs (topics_actors/cli) against a real node over HTTP: what each prints,
its --json, and its exit code (topics_actors/cli/exit_code.py). The original server, when
built at ~/.cache/topics-peers, gets the same basic verbs (skipped otherwise)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

import pytest

from supervisor import cli
from tests.support import wait_for
from tools.testing.node_harness import http_call

pytestmark = pytest.mark.timeout(60)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORIGINAL = os.path.expanduser("~/.cache/topics-peers/topics-original")


def ready(port: int) -> bool:
    try:
        return http_call(port, "GET", "/v0/ready", timeout_s=1).status == 200
    except OSError:
        return False


def run(capsys, monkeypatch, url: str, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    """One verb in process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    code = cli.main(["--url", url, *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def topics(node, capsys, monkeypatch):
    url = f"http://127.0.0.1:{node.http_port}"
    return lambda *argv, stdin="": run(capsys, monkeypatch, url, *argv, stdin=stdin)


def test_append_prints_seqs_and_bad_json_appends_nothing(topics, node):
    assert topics("append", "ap", '{"a":1}', '"x"', "3") == (0, "1\n2\n3\n", "")
    code, out, _ = topics("append", "ap", "--tag", "t", "--node", "n1",
                          stdin='{"b":2}\n\n[1,2]\n')
    assert (code, out) == (0, "4\n5\n")
    code, out, err = topics("append", "ap", "1", "{bad")
    assert code == 2 and out == "" and "argument 2 is not JSON" in err
    code, _, err = topics("append", "ap", stdin="1\nnope\n")
    assert code == 2 and "line 2 is not JSON" in err
    assert node.http("GET", "/v0/topics/ap").json()["head_seq"] == 5    # nothing appended
    records = node.http("POST", "/v0/topics/ap/diff", {"from_seq": 3,
                                                       "include_tags": True}).json()["records"]
    assert [(r["data"], r.get("$tag"), r.get("$node")) for r in records] == [
        ({"b": 2}, "t", "n1"), ([1, 2], "t", "n1")]


def test_append_creates_with_a_durability_and_ls_shows_it(topics, node):
    assert topics("append", "ls-a", "--durability", "ephemeral", "1")[0] == 0
    assert topics("append", "ls-b", "--durability", "fsync", "1", "2")[0] == 0
    code, out, _ = topics("ls", "ls-")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["topic", "head", "count", "bytes", "durability"]
    assert [line.split()[::len(line.split()) - 1] for line in lines[1:]] == [["ls-a", "ephemeral"],
                                                          ["ls-b", "fsync"]]
    code, out, _ = topics("ls", "ls-", "--json")
    listed = json.loads(out)["topics"]
    assert [(t["topic"], t["head_seq"], t["durability"]) for t in listed] == [
        ("ls-a", 1, "ephemeral"), ("ls-b", 2, "fsync")]


def test_info_rm_and_their_exit_codes(topics):
    topics("append", "gone", "1")
    code, out, _ = topics("info", "gone", "--json")
    assert code == 0 and json.loads(out)["head_seq"] == 1
    code, out, _ = topics("info", "gone")
    assert code == 0 and "head_seq" in out and "gone" in out
    assert topics("rm", "gone", "--if-empty")[0] == 1          # 409 topic_not_empty
    assert topics("rm", "gone") == (0, "deleted gone\n", "")
    code, _, err = topics("rm", "gone")
    assert code == 4 and "no such topic" in err
    code, _, err = topics("info", "gone")
    assert code == 4 and "topic_not_found" in err


def test_tail_prints_json_lines_from_a_cursor_or_the_last_n(topics):
    topics("append", "tl", *[str(n) for n in range(1, 2501)])      # three diff pages
    code, out, _ = topics("tail", "tl")
    assert code == 0 and [json.loads(line)["data"] for line in out.splitlines()] == list(
        range(1, 2501))
    _, out, _ = topics("tail", "tl", "--from", "2497")
    assert [json.loads(line)["$seq"] for line in out.splitlines()] == [2498, 2499, 2500]
    _, out, _ = topics("tail", "tl", "-n", "2")
    assert [json.loads(line)["data"] for line in out.splitlines()] == [2499, 2500]


def test_tail_follow_resumes_after_the_gateway_is_killed(node):
    url = f"http://127.0.0.1:{node.http_port}"
    node.http("POST", "/v0/topics/fl", {"records": [{"data": 1}]})
    proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "--url", url, "tail",
                             "fl", "-f"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=REPO))
    seen: list[int] = []
    reader = threading.Thread(target=lambda: seen.extend(
        json.loads(line)["data"] for line in proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: seen == [1], 10, "the record already there")
        node.http("POST", "/v0/topics/fl", {"records": [{"data": 2}]})
        wait_for(lambda: seen == [1, 2], 10, "a record appended while following")
        os.kill(node.process_pid("gateway"), signal.SIGKILL)
        wait_for(lambda: node.process_pid("gateway") and ready(node.http_port), 20,
                 "the gateway back")
        node.http("POST", "/v0/topics/fl", {"records": [{"data": 3}, {"data": 4}]})
        wait_for(lambda: len(seen) >= 4, 20, "the records after the reconnect")
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(10)
        reader.join(5)
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
    assert seen == [1, 2, 3, 4]            # nothing skipped, nothing printed twice
    assert code == 0 and b"reconnecting" in err


def test_queue_verbs_print_counts(topics, node):
    node.http("PUT", "/v0/topics/jobs", {"type": "queue"})
    topics("append", "jobs", '{"job":1}', '{"job":2}', '{"job":3}')
    code, out, _ = topics("queue", "claim", "jobs", "--node", "w1", "--max", "2", "--json")
    claimed = json.loads(out)["claimed"]
    assert code == 0 and [j["$seq"] for j in claimed] == [1, 2]
    assert topics("queue", "ack", "jobs", "1", "2", "--node", "w1") == (0, "acked: 2\n", "")
    code, out, _ = topics("queue", "claim", "jobs", "--node", "w1")
    assert code == 0 and '{"job":3}' in out and "claimed 1" in out
    assert topics("queue", "extend", "jobs", "3", "--node", "w1", "--lease-ms", "60000") == (
        0, "extended: 1\n", "")
    assert topics("queue", "nack", "jobs", "3", "--node", "w1") == (0, "nacked: 1\n", "")
    code, out, _ = topics("queue", "ack", "jobs", "3", "--node", "w2", "--json")
    assert code == 0 and json.loads(out)["acked"] == 0 and json.loads(out)["skipped"] == [3]
    code, _, err = topics("queue", "ack", "jobs", "3", "--node", "w1", "--lease-id", "a",
                          "--lease-id", "b")
    assert code == 2 and "one --lease-id per SEQ" in err


def test_routers_put_ls_rm(topics):
    assert topics("routers", "put", "r1", "--source", "rs", "--dest", "rd") == (
        0, "created r1: rs -> rd\n", "")
    code, out, _ = topics("routers", "ls", "--json")
    assert code == 0 and [(r["router"], r["source"], r["dest"]) for r in json.loads(
        out)["routers"]] == [("r1", "rs", "rd")]
    code, out, _ = topics("routers", "ls")
    assert code == 0 and out.splitlines()[1].split()[:3] == ["r1", "rs", "rd"]
    assert topics("routers", "rm", "r1") == (0, "deleted r1\n", "")
    assert topics("routers", "rm", "r1")[0] == 4


def test_cluster_quarantine_and_unreachable(topics, capsys, monkeypatch):
    code, _, err = topics("cluster")
    assert code == 4 and "not in a cluster" in err
    code, _, err = topics("cluster", "drain", "n1")              # nothing to move here
    assert code == 4 and "not in a cluster" in err
    code, out, _ = topics("quarantine", "--json")
    assert code == 0 and json.loads(out)["quarantined"] == []
    topics("append", "sum", "1", "2", "3")
    code, out, _ = topics("checksum", "sum")       # a single node: one copy, which agrees
    assert code == 0 and "agree over seqs 1..3" in out and "local" in out
    code, out, _ = topics("checksum", "sum", "--from", "2", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["agree"] and doc["chunks"][0]["copies"]["local"]["records"] == 2
    assert topics("checksum", "nosuch")[0] == 4
    code, _, err = run(capsys, monkeypatch, "http://127.0.0.1:1", "ls")
    assert code == 3 and "cannot reach" in err


def test_bench_measures_and_cleans_up(topics, node):
    code, out, _ = topics("bench", "bn", "-p", "2", "-c", "1", "-d", "1", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["append"]["records"] > 0 and doc["append"]["errors"] == 0
    assert doc["read"]["records"] > 0 and doc["append"]["p50_ms"] > 0
    assert node.http("GET", "/v0/topics/bn").status == 404     # deleted afterwards


@pytest.mark.skipif(not os.access(ORIGINAL, os.X_OK), reason="the original is not built")
def test_the_basic_verbs_work_against_the_original(capsys, monkeypatch, tmp_path):
    port = 21300 + os.getpid() % 2000
    env = dict(os.environ, TOPICS_HOST="127.0.0.1", TOPICS_PORT=str(port),
               TOPICS_DATA_DIR=tempfile.mkdtemp(dir=tmp_path))
    server = subprocess.Popen([ORIGINAL], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: ready(port), 10, "the original ready")
        assert run(capsys, monkeypatch, url, "append", "o", "1", '{"a":2}')[:2] == (
            0, "1\n2\n")
        code, out, _ = run(capsys, monkeypatch, url, "ls", "--json")
        assert code == 0 and [t["topic"] for t in json.loads(out)["topics"]] == ["o"]
        code, out, _ = run(capsys, monkeypatch, url, "tail", "o")
        assert [json.loads(line)["data"] for line in out.splitlines()] == [1, {"a": 2}]
        code, out, _ = run(capsys, monkeypatch, url, "info", "o", "--json")
        assert code == 0 and json.loads(out)["head_seq"] == 2
        assert run(capsys, monkeypatch, url, "rm", "o")[:2] == (0, "deleted o\n")
    finally:
        server.terminate()
        server.wait(10)
