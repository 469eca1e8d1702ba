"""HTTP request metrics: each gateway counts into its slot of a shared file, the metrics
handler sums every slot; a restarted gateway counts on in its slot; route labels are the
handler names (a closed set), never raw paths; the Prometheus and JSON forms agree.

Method: two RequestStats on one file stand for two gateway processes (the mapping is the
same shared memory either way); GatewayCore runs against a fake engine without sockets.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from topics_actors.gateway.gateway_core import GatewayCore
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.http_message import HttpRequest
from topics_actors.gateway.request_stats import (
    BOUNDS_US, ROUTES, SLOT_BYTES, RequestStats, create_file,
)

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
def stats_file(tmp_path):
    path = str(tmp_path / "http-requests")
    create_file(path, 2)
    return path


def test_either_gateway_sums_every_slot(stats_file):
    a, b = RequestStats(stats_file, 0), RequestStats(stats_file, 1)
    for i in range(7):
        (a if i % 2 else b).record("append", 201, 300_000)        # 0.3 ms
    a.record("append", 429, 3_000_000)                             # 3 ms
    b.record("get_topic", 404, 40_000_000_000)                     # 40 s: +Inf
    for stats in (a, b):
        figures = stats.figures()
        assert set(figures) == {"append", "get_topic"}
        append = figures["append"]
        assert append.statuses == {"2xx": 7, "4xx": 1} and append.count == 8
        assert append.buckets[0] == 7 and append.buckets[BOUNDS_US.index(5_000)] == 1
        assert append.sum_us == 7 * 300 + 3_000
        assert figures["get_topic"].buckets[-1] == 1
    assert os.path.getsize(stats_file) == 2 * SLOT_BYTES


def test_a_restarted_gateway_neither_loses_nor_doubles_the_totals(stats_file):
    first, other = RequestStats(stats_file, 0), RequestStats(stats_file, 1)
    for _ in range(5):
        first.record("diff", 200, 1_000)
    other.record("diff", 200, 1_000)
    first.close()                      # the gateway exits (or is killed: same mapping)
    restarted = RequestStats(stats_file, 0)
    assert restarted.figures()["diff"].count == 6
    restarted.record("diff", 200, 1_000)
    assert other.figures()["diff"].count == 7


def test_a_slot_outside_the_file_is_refused(stats_file):
    with pytest.raises(ValueError):
        RequestStats(stats_file, 2)


def run(core, method, path, body=b"", accept=None):
    headers = {"content-type": "application/json"}
    if accept:
        headers["accept"] = accept
    return asyncio.run(core.handle(HttpRequest(method, path, "", headers, body)))


class NotReadyEngine:
    async def node_status(self):
        return {"node_ready": False, "replay_progress": 0.5}

    async def call(self, topic, msg, wait_ms=0):
        raise AssertionError("no request reaches a shard here")


def test_the_core_counts_by_handler_and_renders_both_forms(stats_file):
    other = RequestStats(stats_file, 1)
    other.record("health", 200, 1_000)                 # another gateway's request
    core = GatewayCore(GatewaySettings(), NotReadyEngine(), 0,
                       requests=RequestStats(stats_file, 0))
    for name in ("a", "b", "c-1"):
        assert run(core, "GET", f"/v0/topics/{name}/nope").status == 404
    assert run(core, "GET", "/no/such/path").status == 404
    assert run(core, "PATCH", "/healthz").status == 405
    assert run(core, "HEAD", "/healthz").status == 200
    text = run(core, "GET", "/v0/metrics").body.decode()
    assert 'topics_http_requests_total{route="unknown",status="4xx"} 3' in text
    assert 'topics_http_requests_total{route="unmatched",status="4xx"} 2' in text
    assert 'topics_http_requests_total{route="health",status="2xx"} 2' in text
    assert "# TYPE topics_http_request_duration_seconds histogram" in text
    assert 'topics_http_request_duration_seconds_count{route="unknown"} 3' in text
    assert 'topics_http_request_duration_seconds_bucket{route="unknown",le="+Inf"} 3' in text
    assert 'topics_http_request_duration_seconds_sum{route="unknown"} ' in text
    assert "/v0/topics/a" not in text and 'route="c-1"' not in text
    le = [line for line in text.splitlines()
          if line.startswith('topics_http_request_duration_seconds_bucket{route="health"')]
    assert len(le) == len(BOUNDS_US) + 1 and '"0.0005"' in le[0] and '"30"' in le[-2]
    counts = [int(line.rsplit(" ", 1)[1]) for line in le]
    assert counts == sorted(counts) and counts[-1] == 2          # cumulative
    body = json.loads(run(core, "GET", "/v0/metrics", accept="application/json").body)
    http = body["http"]
    assert http["answered_by_gateway"] == 0
    assert http["requests"]["metrics"] == {"2xx": 1}    # the text scrape before this one
    assert http["requests_total"] == 3 + 2 + 2 + 1
    assert http["latency"]["unknown"]["count"] == 3
    assert http["latency"]["unknown"]["buckets_ms"]["+Inf"] == 3
    assert list(http["latency"]["health"]["buckets_ms"])[:2] == ["0.5", "1"]
    assert set(http["requests"]) <= set(ROUTES)


def test_without_a_file_a_gateway_counts_its_own_requests():
    core = GatewayCore(GatewaySettings(), NotReadyEngine(), 0)
    run(core, "GET", "/healthz")
    assert core.requests.figures()["health"].statuses == {"2xx": 1}
