"""The blocking transport of the client core (client_core.py): one DEALER socket per target,
one request in flight, and the loop that runs a flow's steps in the calling thread.

The front's socket is made (and watched for failed CURVE handshakes) when the transport is;
the others when first needed. Not thread-safe: ZeroMQ sockets are not.
"""

from __future__ import annotations

import itertools
import math
import time

import zmq

from topics_actors.client.client_core import (
    Call, ClientCore, Fan, Flow, Pause, Refusal, Request, Target, Tried,
)
from topics_actors.client.curve_credentials import CurveCredentials, HandshakeWatch, wait_slices
from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply, encode


class BlockingTransport:
    def __init__(self, ctx: zmq.Context, core: ClientCore):
        self._ctx = ctx
        self._core = core
        front = core.front
        self._corr = itertools.count(1)
        self._front_endpoint = front.endpoint
        self._front = self._dealer(front.endpoint, front.curve, connect=False)
        self._watch = HandshakeWatch(self._front)   # before the connect: a handshake that
        self._front.connect(front.endpoint)          # fails at once is not missed
        self._socks: dict[int | str, tuple[str, zmq.Socket]] = {front.key: (front.endpoint,
                                                                              self._front)}

    def _dealer(self, endpoint: str, curve: CurveCredentials | None,
                connect: bool = True) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)   # never queue for a peer that is not connected
        if curve is not None:
            curve.apply(sock, endpoint)
        if connect:
            sock.connect(endpoint)
        return sock

    def run(self, flow: Flow):
        """Run `flow` to its end: its result, or its error."""
        send, result = flow.send, None
        try:
            while True:
                step = send(result)
                send = flow.send
                try:
                    result = self.call(step) if type(step) is Call else self._other(step)
                except TopicsError as error:
                    result, send = error, flow.throw
        except StopIteration as done:
            return done.value

    def send(self, req: Request) -> dict:
        """A one-request operation: its request with the core's retries (the first attempt
        without a flow when the route is known), its reply shaped."""
        core = self._core
        call = core.attempt(req.topic, req.msg, req.wait_ms)
        if call is None:
            reply = self.run(core.request(req.topic, req.msg, None, req.wait_ms))
        else:
            started_s = time.monotonic()
            try:
                reply = self.call(call)
            except TopicsError as error:
                reply = self.run(core.request(req.topic, req.msg, None, req.wait_ms,
                                              Tried(started_s, None, error)))
            else:
                if reply is None:
                    reply = self.run(core.request(req.topic, req.msg, None, req.wait_ms,
                                                  Tried(started_s, None,
                                                        sent=call.sent)))
        return reply if req.shape is None else req.shape(reply, *req.shape_args)

    def _other(self, step):
        kind = type(step)
        if kind is Pause:
            time.sleep(step.seconds)
            return None
        if kind is Fan:
            return [self.run(each) for each in step.flows]
        assert kind is Refusal, f"a flow yielded {step!r}"
        return self._watch.refusal(self._front_endpoint)

    def _socket(self, target: Target) -> zmq.Socket:
        current = self._socks.get(target.key)
        if current is None or current[0] != target.endpoint:
            if current is not None:
                current[1].close(0)
            current = self._socks[target.key] = (target.endpoint,
                                                 self._dealer(target.endpoint, target.curve))
        return current[1]

    def call(self, call: Call) -> dict | None:
        """One attempt: the reply, or None if nothing came back in time (or no connection
        came up within `connect_ms`)."""
        sock = self._socket(call.target)
        timeout_ms = call.timeout_ms
        corr = next(self._corr)
        deadline = time.monotonic() + timeout_ms / 1000
        raw = encode(call.msg, corr)
        try:
            sock.send(raw, zmq.NOBLOCK)
        except zmq.Again:   # with IMMEDIATE, writable means connected: wait for that
            if not self._connected(sock, min(timeout_ms, call.connect_ms or timeout_ms)):
                return None
            try:
                sock.send(raw, zmq.NOBLOCK)
            except zmq.Again:
                return None
        call.sent = True
        while (left_ms := (deadline - time.monotonic()) * 1000) > 0:
            # zmq_poll itself: Socket.poll builds a Poller on every call (6.3 against 2.6 us)
            if not zmq.zmq_poll([(sock, zmq.POLLIN)], math.ceil(left_ms)):
                return None
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:   # readable, then its peer dropped out (killed): poll again
                continue
            for raw in frames:
                try:
                    got, body = decode_reply(raw)
                except TopicsError as error:
                    if getattr(error, "corr", None) == corr:
                        raise
                    continue
                if got == corr:
                    return body
        return None

    def _connected(self, sock: zmq.Socket, timeout_ms: int) -> bool:
        """Wait until `sock` can send (with IMMEDIATE: is connected); on the front, give up
        as soon as a handshake fails, which waiting would not mend."""
        if sock is not self._front:
            return bool(sock.poll(timeout_ms, zmq.POLLOUT))
        for slice_ms in wait_slices(timeout_ms):
            if sock.poll(slice_ms, zmq.POLLOUT):
                return True
            if self._watch.failed():
                return False
        return False

    def close(self) -> None:
        for _, sock in self._socks.values():
            sock.close(0)
        self._socks.clear()
        self._watch.close()
