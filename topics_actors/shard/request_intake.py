"""A shard's request intake: what its sockets and lanes hold, taken into the core. Each
request is decoded, checked against its CURVE client key's scopes (the TCP socket of a
node serving CURVE), admitted (a `prevalidated` append from a trusted socket or lane keeps
its data unparsed) and submitted; a request that cannot be decoded or is not allowed is
answered with its error. A flood on one socket does not starve the others.
"""

from __future__ import annotations

import dataclasses
import time

import zmq

from topics_actors.curve_auth import CurveAuth, identity_of
from topics_actors.errors import ErrorCode, ProtocolError, TopicsError
from topics_actors.protocol import decode, encode_error
from topics_actors.protocol.envelope import requests_of
from topics_actors.protocol.messages import Append
from topics_actors.record_batch import VouchedRecords, VouchedText
from topics_actors.shard.lane_listener import LaneListener
from topics_actors.shard.shard_core import ShardCore

DRAIN_SLICE = 64
TCP, IPC = b"t", b"i"      # the tag before a peer's identity: which socket it is on
OWN = b"o"                 # the peer of the shard's own reads, answered in-process


def admitted(msg, trusted: bool):
    """The request as the core gets it. An Append marked `prevalidated` that came from the
    trusted socket carries VouchedRecords or VouchedText (its data is not parsed again);
    from anywhere else the mark changes nothing, since the core goes by the records' type
    alone."""
    if trusted and type(msg) is Append and msg.prevalidated:
        vouched = VouchedText if type(msg.records) is bytes else VouchedRecords
        return dataclasses.replace(msg, records=vouched(msg.records))
    return msg


class RequestIntake:
    def __init__(self, core: ShardCore, sources: list[tuple[zmq.Socket, bytes, bool]],
                 lanes: LaneListener | None, poller: zmq.Poller, curve: CurveAuth | None):
        """`sources`: (socket, tag, trusted) of each ROUTER socket; `lanes`: the ipc
        lanes' listener, if any."""
        self.core = core
        self.sources = sources
        self.lanes = lanes
        self.poller = poller
        self.curve = curve

    def _recv(self, sock: zmq.Socket, tag: bytes):
        """(peer, its requests, t0, the client key they came under or None): every
        non-empty frame after the identity is one request (docs/PROTOCOL.md 4.1), or the
        last frame when none is (an empty message is answered as a bad request)."""
        checked = self.curve is not None and tag == TCP
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK, copy=not checked)
        except zmq.Again:
            return None
        if checked:
            return (tag + frames[0].bytes, requests_of([f.bytes for f in frames]),
                    time.perf_counter_ns(), identity_of(frames[-1]))
        return tag + frames[0], requests_of(frames), time.perf_counter_ns(), None

    def drain(self, limit: int, ready: list) -> int:
        """Take up to `limit` requests, DRAIN_SLICE at a time from each socket in turn, so a
        flood on one socket does not starve the other. Only the sockets the poll reported
        (`ready`, its result) are read: an empty read costs an exception each time."""
        count = self._drain_lanes(ready) if self.lanes is not None else 0
        sources = [s for s in self.sources if any(s[0] is sock for sock, _ in ready)]
        while sources and count < limit:
            busy = []
            for source in sources:
                sock, tag, trusted = source
                taken = self._drain_socket(sock, tag, trusted, min(DRAIN_SLICE, limit - count))
                count += taken
                if taken == DRAIN_SLICE:
                    busy.append(source)
            sources = busy
        return count

    def _drain_lanes(self, ready: list) -> int:
        """What the ready lanes hold (one read each: a lane's reads are bounded by its
        buffer, not by a count of requests), and their pending replies written."""
        count, t0, lanes = 0, time.perf_counter_ns(), self.lanes
        for fd, events in ready:
            if type(fd) is int and lanes.owns(fd):
                for peer, raws in lanes.ready(fd, events):
                    count += len(raws)
                    for raw in raws:
                        self._take(peer, raw, t0, None, True)
        return count

    def _drain_socket(self, sock: zmq.Socket, tag: bytes, trusted: bool, limit: int) -> int:
        count = 0
        while count < limit:
            item = self._recv(sock, tag)
            if item is None:
                break
            peer, raws, t0, key = item
            count += len(raws)
            for raw in raws:
                self._take(peer, raw, t0, key, trusted)
        return count

    def _take(self, peer: bytes, raw: bytes, t0: int, key, trusted: bool) -> None:
        corr = 0
        try:
            corr, msg = decode(raw)
            if self.curve is not None and not trusted and key not in self.curve.peers:
                self.curve.ring.authorize(key, msg)
        except TopicsError as error:
            self.core.submit_error(peer, getattr(error, "corr", None) or corr, error, t0)
            return
        taken = admitted(msg, trusted)
        if taken is not msg:
            self.core.stats.trusted_appends += 1
        self.core.submit(peer, corr, taken, t0)

    def refuse_while_replaying(self) -> list[tuple[bytes, bytes]]:
        """Every request waiting, answered not_ready (the shard replays its WAL)."""
        error = TopicsError("shard is replaying its WAL", ErrorCode.NOT_READY,
                            {"replay_progress": self.core.replay_progress,
                             "shard": self.core.options.shard})
        arrived = []
        for sock, tag, _ in self.sources:
            while (item := self._recv(sock, tag)) is not None:
                arrived.append(item[:2])
        if self.lanes is not None:
            for fd, events in self.poller.poll(0):
                if type(fd) is int and self.lanes.owns(fd):
                    arrived += self.lanes.ready(fd, events)
        replies = []
        for peer, raws in arrived:
            for raw in raws:
                try:
                    corr = decode(raw)[0]
                except ProtocolError as bad:
                    corr = getattr(bad, "corr", 0)
                replies.append((peer, encode_error(corr, error)))
        return replies
