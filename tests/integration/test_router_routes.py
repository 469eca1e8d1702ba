"""How a router's reads of its source travel (shard/routers/router_feed.py): a source in
the router's own shard is read in-process, and the copies of a write are committed in the
loop turn that committed the write, so the shard's next request already sees them; a
source in another shard is read over that shard's lane, and when that shard restarts the
router goes on from its cursor on a new lane, with no record skipped or copied twice.

Method: a ShardServer in this process around a ShardHarness core on the real file system,
turned by hand; requests go in through the ipc socket as a gateway's would.
"""

from __future__ import annotations


import pytest
import zmq

from tests.support import wait_for
from topics_actors.protocol import decode_reply, encode
from topics_actors.protocol.messages import Append, Diff, PutRouter, PutTopic
from topics_actors.shard.shard_server import ShardServer

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server(shard_shells):
    return shard_shells()


class Peer:
    """A DEALER on the shard's ipc socket, as a gateway's."""

    def __init__(self, server: ShardServer, turned: list | None = None):
        """`turned`: the shells to turn while waiting (default: `server`)."""
        self.server = server
        self.turned = turned or [server]
        self.sock = server.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(server.ipc)
        self.corr = 0

    def send(self, msg) -> int:
        self.corr += 1
        self.sock.send(encode(msg, self.corr))
        return self.corr

    def reply(self, corr: int) -> dict:
        """The reply to `corr`, turning the server until it comes."""
        got = {}

        def arrived() -> bool:
            while self.sock.poll(0):
                for raw in self.sock.recv_multipart():
                    got.update([decode_reply(raw)])
            if corr not in got:
                for shell in self.turned:
                    shell.turn()
            return corr in got
        wait_for(arrived, 10, f"reply {corr}")
        return got[corr]

    def call(self, msg) -> dict:
        return self.reply(self.send(msg))

    def close(self) -> None:
        self.sock.close(0)


def test_a_router_copies_a_write_to_its_own_shard_in_the_writes_turn(server):
    peer = Peer(server)
    try:
        peer.call(PutTopic("src"))
        peer.call(PutRouter("dst", "r", "src"))
        wait_for(lambda: server.turn() or server.core.polls.count == 1, 10,
                 "the router's read of its source parked")
        for n in range(1, 4):
            corr = peer.send(Append("src", [[b'{"n":%d}' % n]]))
            wait_for(lambda: peer.sock.poll(0) or server.turn() or False, 10,
                     "the write answered")
            # The turn that answered the write also committed its copy: the shard's core
            # holds it now, before any further turn.
            reply = server.core.routers.find("r")[1]
            assert reply.cursor == n and reply.forwarded_total == n
            assert peer.reply(corr)["seqs"] == [n]
            page = peer.call(Diff("dst", n - 1))
            assert [r[0] for r in page["records"]] == [n]
        assert server.router_feed.lanes.opened == 0         # no socket to itself
    finally:
        peer.sock.close(0)


def test_a_router_reads_a_source_in_another_shard_over_its_lane(shard_shells):
    dest, source = shard_shells(0, 2), shard_shells(1, 2)      # "dst" is on 0, "src" on 1
    shells = [dest, source]
    to_dest, to_source = Peer(dest, shells), Peer(source, shells)
    try:
        to_source.call(PutTopic("src"))
        to_dest.call(PutRouter("dst", "r", "src"))
        for n in (1, 2):
            to_source.call(Append("src", [[b'{"n":%d}' % n]]))
        copied(to_dest, [1, 2], shells)
        assert dest.router_feed.lanes.opened == 1 and source.lanes.accepted >= 1
        shard_shells.stop(source)                            # the source's shard restarts
        source = shard_shells(1, 2)
        shells[1:] = [source]
        to_source.close()
        to_source = Peer(source, shells)
        for n in (3, 4):
            to_source.call(Append("src", [[b'{"n":%d}' % n]]))
        copied(to_dest, [1, 2, 3, 4], shells)
        assert dest.router_feed.lanes.opened == 2 and dest.router_feed.lanes.lost == 1
    finally:
        to_dest.close()
        to_source.close()


def copied(peer: "Peer", seqs: list[int], shells: list) -> None:
    """Wait until the destination holds exactly the copies `seqs`, in order."""
    def done() -> bool:
        for shell in shells:
            shell.turn()
        records = peer.call(Diff("dst", 0))["records"]
        assert [r[0] for r in records] == seqs[:len(records)]    # never a duplicate
        return len(records) == len(seqs)
    wait_for(done, 20, f"copies {seqs}")
