"""What the controller decides, as pure functions of the facts: which nodes hold a new
topic, and who leads after nodes leave or return.

Rules (Kafka's, with unclean election off):
- a new leader comes only from the in-sync replicas that are live and not quarantined
  (a partial or damaged copy is never promoted), and a leader whose copy is quarantined
  is replaced;
- every leader change bumps the leader epoch, including a change to "no leader";
- with no eligible replica the topic goes offline (leader None) and keeps its last ISR, so
  the first of those replicas to come back leads again and nothing acked is lost;
- a dead follower leaves the ISR without an epoch change (the leader keeps serving);
- a leader whose copy recovered in the current epoch (a restart: its log may have lost a
  tail in a power loss, which its followers still hold) is elected again in a new epoch,
  and may stay the leader: it does not lead in the epoch it recovered in (issue 34).
"""

from __future__ import annotations

import dataclasses

from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.errors import ErrorCode, TopicsError


def place_replicas(live: list[str], factor: int, topic_id: int) -> tuple[str, ...]:
    """`factor` distinct live nodes, rotated by the topic id so leaders spread evenly."""
    nodes = sorted(live)
    if factor > len(nodes):
        raise TopicsError(f"replication_factor {factor} needs {factor} live nodes, "
                          f"{len(nodes)} are live", ErrorCode.NOT_ENOUGH_REPLICAS)
    start = topic_id % len(nodes)
    return tuple((nodes[start:] + nodes[:start])[:factor])


def new_topic(live: list[str], factor: int, topic_id: int,
              controller_epoch: int, config: dict | None = None,
              local: str | None = None, first_epoch: int = 1) -> ReplicaState:
    """A topic of one copy stays on the node that asked (`local`), as on a single node;
    copies of a replicated one are spread by placement. `first_epoch`: above every epoch
    of a deleted topic of the same name (replica_state.py)."""
    if factor == 1 and local is not None and local in live:
        replicas = (local,)
    else:
        replicas = place_replicas(live, factor, topic_id)
    return ReplicaState(replicas, replicas, replicas[0], first_epoch, controller_epoch, config,
                        first_epoch=first_epoch)


def reelect(state: ReplicaState, live: set[str], quarantined: set[str],
            controller_epoch: int, unsettled_epoch: int | None = None
            ) -> ReplicaState | None:
    """The state after a membership change, None if nothing changes. A leader whose copy
    was quarantined (recovery found it damaged) is replaced like a dead one; one whose copy
    recovered in the current epoch (`unsettled_epoch`, as its node registered it) is elected
    again in a new one."""
    unsettled = unsettled_epoch is not None and unsettled_epoch >= state.leader_epoch
    if (state.leader is not None and state.leader in live and state.leader not in quarantined
            and not unsettled):
        isr = tuple(node for node in state.isr if node in live)
        if isr == state.isr:
            return None
        return dataclasses.replace(state, isr=isr, controller_epoch=controller_epoch)
    eligible = [node for node in state.replicas
                if node in state.isr and node in live and node not in quarantined]
    if not eligible:
        if state.leader is None:
            return None                  # still offline: wait for an ISR member
        return dataclasses.replace(state, leader=None, leader_epoch=state.leader_epoch + 1,
                                   controller_epoch=controller_epoch)
    leader = eligible[0]
    isr = tuple(node for node in state.isr if node in live)
    return dataclasses.replace(state, isr=isr, leader=leader,
                               leader_epoch=state.leader_epoch + 1,
                               controller_epoch=controller_epoch)
