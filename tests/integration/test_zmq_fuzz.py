"""Property-based fuzz of the ZeroMQ protocol (hypothesis), beside the HTTP fuzz: arbitrary
bytes, msgpack that is no envelope, envelopes with unknown kinds, wrong versions and bad
corrs, and every request kind with fields of the wrong types, sent to a shard and to the
node's front. Properties: every message is answered (never silence), no answer is
`internal`, no process of the node dies, and a refused request changes nothing (the
watched topic's state and the shard's topic list are the same before and after).

TOPICS_FUZZ_EXAMPLES sets the number of cases per target (default 150; the long run in
docs/FAULT_TESTING.md uses 10000).
"""

from __future__ import annotations

import dataclasses
import os

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st

from topics_actors.errors import TopicsError
from topics_actors.protocol.envelope import PROTOCOL_VERSION, decode_reply, registered_kinds
from topics_actors.protocol.messages import Append, GetTopic, ListTopics
from topics_actors.topic_identity import shard_of_name
from tools.testing.node_harness import Node, alive

EXAMPLES = int(os.environ.get("TOPICS_FUZZ_EXAMPLES", "150"))
pytestmark = pytest.mark.timeout(300 + EXAMPLES // 5)
WATCHED = "zfz"
REPLY_TIMEOUT_MS = 15_000
KINDS = registered_kinds()

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.floats(allow_nan=False), st.text(max_size=12), st.binary(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=10)
TOPICS = st.one_of(st.sampled_from([WATCHED, "zfz-new", "", "a" * 300, ".x"]), VALUES)


TYPED = {"int": st.integers(-3, 2**40), "str": st.text(max_size=12), "bool": st.booleans(),
         "list": st.lists(VALUES, max_size=3), "dict": st.dictionaries(st.text(max_size=6),
                                                                      VALUES, max_size=3),
         "bytes": st.binary(max_size=12), "float": st.floats(allow_nan=False)}


def _typed(annotation: str):
    """Values of the field's own type (so the handler behind the decoder is reached)."""
    parts = [TYPED.get(part.strip(), VALUES) for part in annotation.split("|")
             if part.strip() != "None"]
    return st.one_of(*parts, st.none()) if "None" in annotation else st.one_of(*parts)


def _body(kind: str, typed: bool):
    """A body for `kind`: some of its fields, each a value of its type (`typed`) or of any
    type (a topic field mostly a name), and now and then a stranger field."""
    fields = {f.name: (TOPICS if f.name == "topic" else _typed(str(f.type)) if typed
                       else VALUES)
              for f in dataclasses.fields(KINDS[kind])}
    fields["x-unknown"] = VALUES
    return st.fixed_dictionaries({}, optional=fields)


ENVELOPES = st.one_of(
    st.sampled_from(sorted(KINDS)).flatmap(lambda kind: st.tuples(
        st.sampled_from([PROTOCOL_VERSION] * 8 + [0, 1, 99]), st.just(kind),
        st.integers(0, 2**32), st.one_of(_body(kind, True), _body(kind, True),
                                         _body(kind, False), VALUES))),
    st.tuples(st.sampled_from([PROTOCOL_VERSION, "2"]), st.one_of(st.text(max_size=12), VALUES),
              st.one_of(st.integers(0, 9), VALUES), VALUES)).map(
    lambda parts: msgpack.packb(list(parts), use_bin_type=True))
MESSAGES = st.one_of(ENVELOPES, ENVELOPES, ENVELOPES,
                     VALUES.map(lambda v: msgpack.packb(v, use_bin_type=True)),
                     st.binary(max_size=64))


class Target:
    """A DEALER to one endpoint: send one raw message, wait for its one answer."""

    def __init__(self, ctx: zmq.Context, endpoint: str):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def ask(self, raw: bytes) -> tuple[bool, str | None]:
        """(refused, error code or None); fails the test on silence."""
        self.sock.send(raw)
        assert self.sock.poll(REPLY_TIMEOUT_MS), f"no answer to {raw[:200]!r}"
        frames = self.sock.recv_multipart()
        assert len(frames) == 1, frames
        try:
            decode_reply(frames[0])
        except TopicsError as error:
            return True, error.code.wire
        return False, None

    def call(self, msg) -> dict:
        from topics_actors.protocol.envelope import encode
        self.sock.send(encode(msg, 1))
        assert self.sock.poll(REPLY_TIMEOUT_MS)
        return decode_reply(self.sock.recv_multipart()[0])[1]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    base = tmp_path_factory.mktemp("zfuzz")
    node = Node(str(base / "data"), 2, log_path=str(base / "node.log")).start()
    ctx = zmq.Context()
    status = node.status()
    shard = status["shards"][shard_of_name(WATCHED, 2)]
    targets = {"shard": Target(ctx, shard["endpoint"]), "front": Target(ctx, node.endpoint)}
    targets["shard"].call(Append(WATCHED, [[b'{"n":%d}' % i, f"t{i}", None, None]
                                           for i in range(5)]))
    pids = sorted(c.pid for c in node.children())
    try:
        yield node, targets, pids
    finally:
        for target in targets.values():
            target.sock.close(0)
        ctx.term()
        node.stop()
        assert not alive(pids), "the node left processes behind"


def state(target: Target) -> tuple:
    try:
        topic = target.call(GetTopic(WATCHED, touch=False))
        fields = tuple(topic[k] for k in ("head_seq", "earliest_seq", "count", "bytes"))
    except TopicsError as error:    # an accepted delete_topic may have removed it
        fields = (error.code.wire,)
    names = [t["topic"] for t in target.call(ListTopics("", "", 1000))["topics"]]
    return fields, sorted(names)


def _fuzz_one(fuzzed, which: str, raw: bytes) -> None:
    node, targets, pids = fuzzed
    shard = targets["shard"]
    before = state(shard)
    refused, code = targets[which].ask(raw)
    assert code != "internal", (which, raw[:300])
    if refused:
        assert state(shard) == before, (which, raw[:300], code)
    assert sorted(c.pid for c in node.children()) == pids, (which, raw[:300])


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=MESSAGES)
def test_fuzz_a_shard(fuzzed, raw):
    _fuzz_one(fuzzed, "shard", raw)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=MESSAGES)
def test_fuzz_the_front(fuzzed, raw):
    _fuzz_one(fuzzed, "front", raw)
