"""The shard's two request sockets (shard/shard_server.py): TCP for anyone, ipc for the node.

Goal: replies go back on the socket their request came from, also when peers of both send
in the same turn; a message may carry several requests, each answered as if it came alone
(a bad one refused by itself); a `prevalidated` append is trusted (counted, its data not
parsed) only on ipc, while on TCP the flag changes nothing and text that is not JSON is
refused; only the node's user may open the ipc socket file.

Method: a ShardServer in this process around a ShardHarness core on the real file system,
turned by hand; DEALER sockets on both endpoints send raw envelopes.
"""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply, encode
from topics_actors.protocol.messages import Append, Status
from topics_actors.shard.shard_server import ShardServer
from tests.support import wait_for

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server(shard_shells):
    return shard_shells()


def _dealer(server: ShardServer, endpoint: str) -> zmq.Socket:
    sock = server.ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _replies(server: ShardServer, sock: zmq.Socket, count: int) -> dict:
    """{corr: reply body or TopicsError} for `count` replies, turning the server meanwhile."""
    got: dict = {}

    def received() -> bool:
        server.turn()
        while sock.poll(0):
            for raw in sock.recv_multipart():
                try:
                    corr, body = decode_reply(raw)
                except TopicsError as error:     # an error reply: kept to compare
                    corr, body = error.corr, error
                got[corr] = body
        return len(got) >= count
    wait_for(received, 10, f"{count} replies")
    return got


def test_replies_go_back_on_the_socket_each_request_came_from(server):
    tcp, ipc = _dealer(server, server.endpoint), _dealer(server, server.ipc)
    try:
        for sock in (tcp, ipc):                      # connected before the real test
            sock.send(encode(Status(), 1))
            assert set(_replies(server, sock, 1)) == {1}
        for corr in (10, 11):
            tcp.send(encode(Append("a", [[b"1"]]), corr))
        ipc.send(encode(Append("b", [[b"2"]]), 20))
        wait_for(lambda: all(sock.poll(0) for sock, _, _ in server.sources), 10,
                 "requests queued on both sockets")
        server.turn()                                # one turn takes and answers all three
        assert set(_replies(server, ipc, 1)) == {20}
        assert set(_replies(server, tcp, 2)) == {10, 11}
        assert not ipc.poll(50) and not tcp.poll(50)
    finally:
        tcp.close(0)
        ipc.close(0)


def test_a_prevalidated_append_is_trusted_only_on_ipc(server):
    stats = server.core.stats
    tcp, ipc = _dealer(server, server.endpoint), _dealer(server, server.ipc)
    try:
        tcp.send(encode(Append("t", [[b"{not json"]], prevalidated=True), 1))
        refused = _replies(server, tcp, 1)[1]
        assert refused.code.wire == "invalid_request" and "not valid JSON" in str(refused)
        tcp.send(encode(Append("t", [[b'{"a":1}']], prevalidated=True), 2))
        assert _replies(server, tcp, 1)[2]["seqs"] == [1]
        assert stats.trusted_appends == 0
        ipc.send(encode(Append("t", [[b'{"b":2}'], [b"3", None, None, b'{"k":1}']],
                               prevalidated=True), 3))
        assert _replies(server, ipc, 1)[3]["seqs"] == [2, 3]
        assert stats.trusted_appends == 1
        ipc.send(encode(Append("t", [[b'"' + b"x" * (1 << 20) + b'"']], prevalidated=True),
                        4))
        assert _replies(server, ipc, 1)[4].code.wire == "record_too_large"
    finally:
        tcp.close(0)
        ipc.close(0)


def test_several_requests_in_one_message_are_each_answered(server):
    tcp = _dealer(server, server.endpoint)
    try:
        tcp.send_multipart([encode(Append("t", [[b"1"]]), 1), b"\x93bad",
                            encode(Append("t", b'[2,{"three":3}]'), 3),
                            encode(Append("t", b"[not json"), 4), encode(Status(), 5)])
        got = _replies(server, tcp, 5)
        assert (got[1]["first_seq"], got[3]["first_seq"], got[3]["last_seq"]) == (1, 2, 3)
        assert got[0].code.wire == "invalid_request"          # the undecodable frame
        assert got[4].code.wire == "invalid_request" and "not valid JSON" in str(got[4])
        assert got[5]["shard"] == 0
        assert server.core.stats.requests == 4      # the undecodable one never reaches it
    finally:
        tcp.close(0)


def test_only_the_node_user_may_open_the_ipc_socket(server):
    mode = os.stat(server.ipc[len("ipc://"):]).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
