"""The client core without sockets (client/client_core.py): its flows run against a scripted
node, each Call answered by the script in order.

Goal: routing (a topic to its shard, a non-routing client to the front, a replicated
topic to the leader a not_leader names), retries (not_ready refreshes the map, silence too,
within the deadline; a final error at once; a node never reached fails at once), and a
transport's own first attempt (`attempt`, then `request(..., tried=...)`) going on exactly
as the flow's own attempt would. Method: a runner like the transports' that answers each
Call from a list of (target key, reply or error) and records the targets; Pauses are not
slept.
"""

from __future__ import annotations

import time

import pytest

from topics_actors.client.client_core import (
    LEADER_SILENCE_MS, Call, ClientCore, Fan, Pause, Refusal, Tried,
)
from topics_actors.client.shard_map import FRONT
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import Append, GetTopic, Status
from topics_actors.topic_identity import shard_of_name

pytestmark = pytest.mark.timeout(10)

STATUS = {"shard_count": 2, "node_ready": True, "shards": [
    {"shard": 0, "endpoint": "tcp://h:10", "incarnation": 1, "state": "ready"},
    {"shard": 1, "endpoint": "tcp://h:11", "incarnation": 1, "state": "ready"}]}
NOT_READY = TopicsError("replaying", ErrorCode.NOT_READY)
UNSENT = object()       # a Call that found no peer to send to (silence, nothing sent)


class Script:
    """Answers Calls in order: Status to the front with STATUS, others from `answers`."""

    def __init__(self, answers: list):
        self.answers = list(answers)
        self.status = STATUS
        self.calls: list[Call] = []
        self.pauses = 0

    def run(self, flow):
        send, result = flow.send, None
        try:
            while True:
                step = send(result)
                send = flow.send
                if type(step) is Pause:
                    self.pauses += 1
                    result = None
                elif type(step) is Fan:
                    result = [self.run(each) for each in step.flows]
                elif type(step) is Refusal:
                    result = None
                else:
                    self.calls.append(step)
                    answer = self.status if type(step.msg) is Status else self.answers.pop(0)
                    step.sent = answer is not UNSENT
                    answer = None if answer is UNSENT else answer
                    if isinstance(answer, TopicsError):
                        result, send = answer, flow.throw
                    else:
                        result = answer
        except StopIteration as done:
            return done.value

    def keys(self) -> list:
        return [c.target.key for c in self.calls if type(c.msg) is not Status]


def core(route: bool = True, deadline_ms: int = 5_000) -> ClientCore:
    return ClientCore("tcp://front:1", route=route, node_local=False,
                      request_timeout_ms=1_000, retry_deadline_ms=deadline_ms,
                      connect_timeout_ms=500, curve=None)


def test_a_request_goes_to_the_topic_shard_and_its_route_is_remembered():
    client, script = core(), Script([{"ok": 1}, {"ok": 2}])
    assert script.run(client.request("t", GetTopic("t", False))) == {"ok": 1}
    call = client.attempt("t", GetTopic("t", False), 0)     # the transport's fast path
    assert call.target.key == shard_of_name("t", 2) == script.keys()[0]
    assert call.timeout_ms == 1_000
    assert client.attempt("other", GetTopic("other", False), 0) is None   # not routed yet


def test_a_client_that_does_not_route_sends_to_the_front():
    client, script = core(route=False), Script([{"ok": 1}])
    script.run(client.request("t", GetTopic("t", False)))
    assert script.keys() == [FRONT]


def test_not_ready_and_silence_are_retried_with_a_fresh_map():
    client, script = core(), Script([NOT_READY, None, {"ok": 1}])
    assert script.run(client.request("t", GetTopic("t", False))) == {"ok": 1}
    statuses = [c for c in script.calls if type(c.msg) is Status]
    assert len(statuses) == 3 and script.pauses == 2      # the map asked again each time


def test_a_final_error_is_raised_at_once():
    client = core()
    script = Script([TopicsError("no such topic", ErrorCode.TOPIC_NOT_FOUND)])
    with pytest.raises(TopicsError) as raised:
        script.run(client.request("t", GetTopic("t", False)))
    assert raised.value.code is ErrorCode.TOPIC_NOT_FOUND and script.pauses == 0


def test_a_transports_first_attempt_goes_on_as_the_flows_own_would():
    """A failed first attempt (an error, or silence) is retried, once each, not forever."""
    client, script = core(), Script([{"warm": 1}, {"ok": 1}, {"ok": 2}])
    script.run(client.request("t", GetTopic("t", False)))
    started = time.monotonic()
    assert script.run(client.request("t", GetTopic("t", False), None, 0,
                                     Tried(started, None, NOT_READY))) == {"ok": 1}
    assert script.run(client.request("t", GetTopic("t", False), None, 0,
                                     Tried(started, None))) == {"ok": 2}
    assert script.pauses == 2 and script.answers == []      # one backoff each


def test_the_deadline_ends_the_retries():
    client, script = core(deadline_ms=0), Script([{"warm": 1}, NOT_READY])
    script.run(client.request("t", GetTopic("t", False)))
    with pytest.raises(TopicsError) as raised:
        script.run(client.request("t", GetTopic("t", False)))
    assert raised.value.code is ErrorCode.NOT_READY and "deadline" in raised.value.message


def test_not_leader_sends_the_topic_to_the_leaders_front_at_once():
    leader = TopicsError("not the leader", ErrorCode.NOT_LEADER,
                         {"leader_front": "tcp://other:1"})
    client, script = core(), Script([leader, {"ok": 1}, {"ok": 2}])
    assert script.run(client.request("t", GetTopic("t", False))) == {"ok": 1}
    assert script.run(client.request("t", GetTopic("t", False))) == {"ok": 2}
    assert script.keys()[1:] == ["tcp://other:1", "tcp://other:1"] and script.pauses == 0


def test_a_node_never_reached_fails_at_once():
    client = core()

    class Silent(Script):
        def run(self, flow):
            step = flow.send(None)
            assert type(step) is Call and type(step.msg) is Status and step.connect_ms == 500
            step = flow.send(None)
            assert type(step) is Refusal
            flow.send(None)
    with pytest.raises(TopicsError) as raised:
        Silent([]).run(client.request("t", GetTopic("t", False)))
    assert "no node at tcp://front:1" in raised.value.message


def test_a_request_to_every_shard_fans_out_and_keeps_their_order():
    client, script = core(), Script([{"topics": [], "n": 0}, {"topics": [], "n": 1}])
    replies = script.run(client.all_shards(GetTopic("x", False)))
    assert [r["n"] for r in replies] == [0, 1] and script.keys() == [0, 1]


# --- failover (docs/CLUSTER.md 5) -------------------------------------------------------------

def _not_leader(front: str, **detail) -> TopicsError:
    return TopicsError("not the leader", ErrorCode.NOT_LEADER, {"leader_front": front, **detail})


def _append(client: ClientCore) -> Append:
    return Append("t", [[b"1", None, None, None]], None, client.session_key())


def test_a_silent_leader_is_looked_up_again_at_the_clients_own_node_soon():
    client = core()
    script = Script([_not_leader("tcp://old:1"), None, _not_leader("tcp://new:1"), {"ok": 1}])
    assert script.run(client.request("t", GetTopic("t", False))) == {"ok": 1}
    local = shard_of_name("t", 2)
    assert script.keys() == [local, "tcp://old:1", local, "tcp://new:1"]
    assert [c.timeout_ms for c in script.calls if c.target.key == "tcp://old:1"] == [
        LEADER_SILENCE_MS]
    assert len([c for c in script.calls if type(c.msg) is Status]) == 1   # the map kept


def test_an_append_whose_fate_is_unknown_fails_outcome_unknown_never_plain_retryable():
    client = core(deadline_ms=0)
    msg = _append(client)
    script = Script([_not_leader("tcp://old:1"), None, NOT_READY])
    with pytest.raises(TopicsError) as raised:
        script.run(client.request("t", msg))
    error = raised.value
    assert error.code is ErrorCode.OUTCOME_UNKNOWN and error.status == 504
    assert not error.retryable and error.detail["idempotency_key"] == msg.idempotency_key
    # never sent (no connection to the dead leader): nothing can have been stored
    client = core(deadline_ms=0)
    script = Script([_not_leader("tcp://old:1"), UNSENT, NOT_READY])
    with pytest.raises(TopicsError) as raised:
        script.run(client.request("t", _append(client)))
    assert raised.value.code is ErrorCode.NOT_READY


def test_an_in_doubt_write_goes_on_to_the_new_leader_with_its_key():
    client = core(deadline_ms=0)
    msg = _append(client)
    doubt = _not_leader("tcp://new:1", in_doubt=True)
    script = Script([_not_leader("tcp://old:1"), doubt, {"first_seq": 7, "deduped": True}])
    assert script.run(client.request("t", msg))["first_seq"] == 7
    assert [c.msg.idempotency_key for c in script.calls if type(c.msg) is Append] == [
        msg.idempotency_key] * 3
    script = Script([_not_leader("tcp://old:1", in_doubt=True), NOT_READY])
    with pytest.raises(TopicsError) as raised:
        script.run(core(deadline_ms=0).request("t", _append(client)))
    assert raised.value.code is ErrorCode.OUTCOME_UNKNOWN


def test_too_few_in_sync_replicas_is_answered_at_once():
    client = core()
    script = Script([TopicsError("1 of 2", ErrorCode.NOT_ENOUGH_REPLICAS, {"min_isr": 2})])
    with pytest.raises(TopicsError) as raised:
        script.run(client.request("t", GetTopic("t", False)))
    assert raised.value.code is ErrorCode.NOT_ENOUGH_REPLICAS and script.pauses == 0


def test_a_client_whose_node_went_silent_goes_on_through_another_node():
    client = core()
    script = Script([{"warm": 1}, {"ok": 1}])
    script.status = {**STATUS, "cluster": {"nodes": {
        "n1": {"advertise": "front", "zmq_port": 1}, "n2": {"advertise": "h2", "zmq_port": 2}}}}
    script.run(client.request("t", GetTopic("t", False)))
    silent = Script([])
    silent.status = None                          # the front does not answer: its node died
    with pytest.raises(TopicsError):
        silent.run(client.status())
    assert client.front.endpoint == "tcp://h2:2"
    assert script.run(client.request("t", GetTopic("t", False))) == {"ok": 1}
    assert script.calls[-2].target.endpoint == "tcp://h2:2"     # the map asked there
