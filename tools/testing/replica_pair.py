"""A replicated topic's leader and follower shards in one process, without sockets: each a
ShardHarness of its own node over its own data dir, given the same replication state
(ReplicaRoles) the supervisors would send, with the follower's fetches carried to the
leader and the answers back by hand, one round at a time. Unit tests of what replicates
(records, ops, floors) use it; tests/cluster runs the same over real nodes."""

from __future__ import annotations

import dataclasses
import os
import time

from tools.testing.fault_fs import FaultFs
from tools.testing.shard_harness import ShardEnv, ShardHarness
from topics_actors.protocol import decode_reply
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.protocol.messages import ReplicaFetch
from topics_actors.shard.replication.replica_book import ReplicaAnswer

LEADER, FOLLOWER = "a", "b"


def pair_env(root, name: str, fs=None) -> ShardEnv:
    """A node's data dir `name` under `root` (a FaultFs unless `fs`)."""
    path = os.path.join(str(root), name)
    os.makedirs(path)
    return ShardEnv(path, fs if fs is not None else FaultFs())


class ReplicaPair:
    def __init__(self, leader_env: ShardEnv, follower_env: ShardEnv, topic: str,
                 config: dict, clock=None, **harness_options):
        self.topic, self.config = topic, {"replication_factor": 2, **config}
        self.leader = _start(leader_env, LEADER, clock, harness_options)
        self.follower = _start(follower_env, FOLLOWER, clock, harness_options)
        self.roles()

    def roles(self, leader: str = LEADER, epoch: int = 1,
              isr: tuple[str, ...] = (LEADER, FOLLOWER)) -> None:
        """Both shards take the topic's state: `leader` leads it in `epoch`."""
        for harness in (self.leader, self.follower):
            harness.call(self.roles_message(leader, epoch, isr))

    def roles_message(self, leader: str = LEADER, epoch: int = 1,
                      isr: tuple[str, ...] = (LEADER, FOLLOWER),
                      version: int | None = None, **state) -> ReplicaRoles:
        """The topic's state as a supervisor sends it (`config`: the pair's; `state`: more
        fields, such as `deleted` or `first_epoch`)."""
        role = {"topic": self.topic, "leader": leader, "leader_epoch": epoch,
                "isr": list(isr), "replicas": [LEADER, FOLLOWER],
                "version": epoch if version is None else version,
                "config": self.config, "leader_shards": [f"inproc://{leader}"], **state}
        return ReplicaRoles([role], complete=True)

    def round(self) -> int:
        """Every request the follower would send now, answered by the leader (never
        parked) and applied by the follower; how many went."""
        sent = 0
        for name, _endpoint, ask in self.follower.core.replicas.follower.requests():
            if isinstance(ask, ReplicaFetch):
                ask = dataclasses.replace(ask, wait_ms=0)
            self.follower.call(ReplicaAnswer(name, ask.KIND, self.leader.call(ask)))
            sent += 1
        return sent

    def committed_round(self) -> None:
        """round(), each fetch committed in a batch of the leader's own, so that its
        answer comes out of a commit that may also release a delete's held reply."""
        for name, _endpoint, ask in self.follower.core.replicas.follower.requests():
            if isinstance(ask, ReplicaFetch):
                ask = dataclasses.replace(ask, wait_ms=0)
            core = self.leader.core
            core.submit(b"fetch", 1, ask, time.perf_counter_ns())
            body, = [decode_reply(raw)[1] for peer, raw in core.commit() if peer == b"fetch"]
            self.follower.call(ReplicaAnswer(name, ask.KIND, body))

    def rounds(self, count: int = 4) -> None:
        for _ in range(count):
            self.round()

    def close(self) -> None:
        for harness in (self.leader, self.follower):
            if harness.core is not None:
                harness.crash()


def _start(env: ShardEnv, node_id: str, clock, options: dict) -> ShardHarness:
    env.layout(1)
    if clock:
        options = {**options, "clock": clock}
    return env.shard(0, 1, node_id=node_id, **options).start()
