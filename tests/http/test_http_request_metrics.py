"""HTTP request metrics are the node's: with two gateway processes behind one port, N
requests show as N in GET /v0/metrics whichever gateway answers it, and a gateway killed
and restarted neither loses nor doubles them.

Method: each request is a new connection, so the kernel hands it to either gateway; the
JSON form names the gateway that answered (`http.answered_by_gateway`), and the test keeps
scraping until both gateways have answered.
"""

import os
import signal

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.timeout(120)

N = 40


def gateways(node) -> list[dict]:
    return [p for p in node.status()["processes"] if p["role"] == "gateway"]


def both_ready(node):
    found = gateways(node)
    return found if len(found) == 2 and all(p["state"] == "ready" for p in found) else None


def appends_seen_by_each_gateway(node) -> dict:
    """{gateway index: the append count its metrics show} once both have answered."""
    seen = {}

    def scrape():
        body = node.http("GET", "/v0/metrics", headers={"Accept": "application/json"}).json()
        http = body["http"]
        seen[http["answered_by_gateway"]] = http["requests"].get("append", {}).get("2xx", 0)
        return len(seen) == 2
    wait_for(scrape, 30, "metrics answered by both gateways")
    return seen


def test_two_gateways_report_the_node_totals_across_a_restart(make_node):
    node = make_node(env={"TOPICS_GATEWAY_WORKERS": "2"})
    ready = wait_for(lambda: both_ready(node), 30, "two gateways")
    for i in range(N):
        assert node.http("POST", "/v0/topics/rm", {"records": [{"data": i}]}).status in (200,
                                                                                         201)
    assert appends_seen_by_each_gateway(node) == {0: N, 1: N}
    text = node.http("GET", "/v0/metrics").body.decode()
    assert f'topics_http_requests_total{{route="append",status="2xx"}} {N}' in text
    assert f'topics_http_request_duration_seconds_count{{route="append"}} {N}' in text
    assert "/v0/topics/rm" not in text
    victim = ready[0]
    os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: any(p["index"] == victim["index"] and p["state"] == "ready"
                         and p["pid"] != victim["pid"] for p in gateways(node)), 30,
             "the gateway's restart")
    assert appends_seen_by_each_gateway(node) == {0: N, 1: N}
