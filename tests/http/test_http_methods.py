"""Methods per path: a 405 says which methods the path takes (Allow), and the probes answer
HEAD like GET without a body (load balancers and uptime checks send HEAD)."""

from __future__ import annotations

import pytest

from tests.http.test_http_topics import error_of


@pytest.mark.parametrize("path", ["/v0/health", "/healthz", "/v0/ready", "/readyz"])
def test_head_on_a_probe_is_its_get_without_a_body(node, path):
    got = node.http("GET", path)
    head = node.http("HEAD", path)
    assert head.status == got.status == 200
    assert head.body == b"" and head.headers["content-type"] == "application/json"


@pytest.mark.parametrize("method, path, allow", [
    ("GET", "/v0/topics/x/diff", "POST"),
    ("DELETE", "/v0/topics/x/delete", "POST"),
    ("PATCH", "/v0/topics/x", "DELETE, GET, POST, PUT"),
    ("POST", "/v0/health", "GET, HEAD"),
    ("HEAD", "/v0/topics", "GET"),
])
def test_a_405_names_the_allowed_methods(node, method, path, allow):
    reply = node.http(method, path)
    assert reply.status == 405 and reply.headers["allow"] == allow
    if method != "HEAD":
        error_of(reply, 405, "method_not_allowed")
