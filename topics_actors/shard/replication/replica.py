"""This shard's part in each replicated topic it owns (docs/CLUSTER.md): the topic's
replication state as the supervisor sent it (its Role), and what this node does with it:
lead it (a Leadership), follow it (a Followership), or only know where it is led.
`Replicas` holds them by topic, and what a commit hands on: the `acks: all` answers let go
and the topics whose readers or parked fetches to wake.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import NamedTuple

from topics_actors.cluster.follower_fetch import FollowerFetch
from topics_actors.cluster.isr_tracker import AckWaiters, IsrTracker
from topics_actors.errors import TopicsError
from topics_actors.shard.replication.replica_keys import KeyTrail
from topics_actors.shard.replication.replica_role import Role


class ReplicaKind(enum.Enum):
    """What this node is for one replicated topic."""
    LEADER = "leader"
    FOLLOWER = "follower"
    BYSTANDER = "bystander"    # not a replica, or a replica with no leader to follow now


class Released(NamedTuple):
    """An answer the replica book lets go: `body`, or `error` (the shell sends it)."""
    peer: bytes
    corr: int
    t0_ns: int
    body: dict | None
    error: TopicsError | None


class Leadership:
    """A leader's state of one topic: its followers' progress and the high watermark
    (tracker), the `acks: all` writes waiting for it, the ISR last proposed, the last
    records read for a fetch (followers in step fetch the same range), and the keys of its
    newest keyed writes, which travel with the records (replica_keys.py; None for a topic
    of one copy). Its fields are its own: the duties reach them through these methods."""
    __slots__ = ("_tracker", "_waiters", "_proposal", "_read_memo", "_keys")

    def __init__(self, tracker: IsrTracker, waiters: AckWaiters, keys: KeyTrail | None):
        self._tracker = tracker
        self._waiters = waiters
        self._proposal: tuple | None = None
        self._read_memo: tuple | None = None
        self._keys = keys

    @property
    def tracker(self) -> IsrTracker:
        """The followers' progress, the ISR and the high watermark (cluster/isr_tracker.py),
        moved only through the tracker's own methods."""
        return self._tracker

    @property
    def keys(self) -> KeyTrail | None:
        return self._keys

    @property
    def leader_epoch(self) -> int:
        return self._tracker.leader_epoch

    def new_epoch(self, tracker: IsrTracker) -> None:
        """A new leader epoch: a new tracker; the waiting writes and the keys stay."""
        self._tracker, self._proposal = tracker, None

    def same_epoch(self, replicas: tuple[str, ...], min_isr: int, isr: tuple[str, ...],
                   now_ms: int, seed_keys: Callable[[], KeyTrail]) -> bool:
        """The same epoch's replica set (a move adds or removes replicas), min_isr and ISR
        as ZooKeeper holds them now; whether the high watermark moved. A copy of one that
        gets a follower starts its key trail (`seed_keys`)."""
        tracker, self._proposal = self._tracker, None
        tracker.min_isr = min_isr
        if tracker.replicas != replicas:
            tracker.set_replicas(replicas, now_ms)
            if self._keys is None and len(replicas) > 1:
                self._keys = seed_keys()
        return tracker.isr != isr and tracker.isr_written(isr)

    def proposal(self, now_ms: int) -> tuple[str, ...] | None:
        """The ISR to write to ZooKeeper now: None if it stays, or was proposed already."""
        wanted = self._tracker.proposal(now_ms)
        if wanted is None or wanted == self._proposal:
            return None
        self._proposal = wanted
        return wanted

    def hold(self, last_seq: int, waiter: tuple) -> bool:
        """An `acks: all` answer waits for the watermark to cover `last_seq`; False: no
        room (the caller answers `throttled`)."""
        return self._waiters.add(last_seq, waiter)

    def released(self, hw_seq: int) -> list:
        """The waiting answers the watermark `hw_seq` covers, taken out."""
        return self._waiters.released(hw_seq)

    def drain(self) -> list:
        """Every waiting answer (leadership lost: they are answered "in doubt")."""
        return self._waiters.drain()

    def waiting(self) -> int:
        return len(self._waiters)

    def records(self, key: tuple, read: Callable[[], dict]) -> dict:
        """`read()`, or what it gave the last fetch if that one asked with the same `key`."""
        if self._read_memo is None or self._read_memo[0] != key:
            self._read_memo = key, read()
        return self._read_memo[1]


class Followership:
    """A follower's state of one topic: its fetch state machine, and how far its op log is
    durable (what it reports to the leader)."""
    __slots__ = ("_fetch", "_ops_durable")

    def __init__(self, fetch: FollowerFetch, ops_durable: int):
        self._fetch = fetch
        self._ops_durable = ops_durable

    @property
    def fetch(self) -> FollowerFetch:
        """What to ask the leader next (cluster/follower_fetch.py), moved only through the
        state machine's own methods."""
        return self._fetch

    @property
    def ops_durable(self) -> int:
        return self._ops_durable

    def ops_written(self, ops_leo: int) -> None:
        """The op log is durable up to `ops_leo` (reported with the next fetch)."""
        self._ops_durable = ops_leo


class Replica:
    """One replicated topic at this shard: its role, and its lead or follow state (changed
    only through Replicas, which indexes them)."""
    __slots__ = ("role", "lead", "follow")

    def __init__(self, role: Role):
        self.role = role
        self.lead: Leadership | None = None
        self.follow: Followership | None = None

    @property
    def kind(self) -> ReplicaKind:
        if self.lead is not None:
            return ReplicaKind.LEADER
        return ReplicaKind.FOLLOWER if self.follow is not None else ReplicaKind.BYSTANDER


class Replicas:
    """The replicas of this shard by topic (with the topics it leads and follows indexed),
    and what a commit hands on."""

    def __init__(self):
        self._by_topic: dict[str, Replica] = {}
        self._leading: set[str] = set()
        self._following: set[str] = set()
        self._released: list[Released] = []
        self._woken: set[str] = set()

    def __len__(self) -> int:
        return len(self._by_topic)

    def __contains__(self, name: str) -> bool:
        return name in self._by_topic

    def role(self, name: str) -> Role | None:
        replica = self._by_topic.get(name)
        return None if replica is None else replica.role

    def kind(self, name: str) -> ReplicaKind | None:
        replica = self._by_topic.get(name)
        return None if replica is None else replica.kind

    def lead(self, name: str) -> Leadership | None:
        replica = self._by_topic.get(name)
        return None if replica is None else replica.lead

    def follow(self, name: str) -> Followership | None:
        replica = self._by_topic.get(name)
        return None if replica is None else replica.follow

    def set_role(self, role: Role) -> None:
        replica = self._by_topic.get(role.topic)
        if replica is None:
            self._by_topic[role.topic] = Replica(role)
        else:
            replica.role = role

    def remove(self, name: str) -> None:
        """Forget `name` (no state of it any more); it must lead nothing."""
        assert name not in self._leading, f"a replica of {name!r} dropped while it leads"
        self.stop_following(name)
        self._by_topic.pop(name, None)

    def names(self) -> list[str]:
        return list(self._by_topic)

    # --- leading and following ------------------------------------------------------------

    def start_leading(self, name: str, lead: Leadership) -> None:
        replica = self._by_topic[name]
        assert replica.follow is None, f"{name!r} led while it is followed"
        replica.lead = lead
        self._leading.add(name)

    def stop_leading(self, name: str) -> Leadership | None:
        replica = self._by_topic.get(name)
        if replica is None or replica.lead is None:
            return None
        lead, replica.lead = replica.lead, None
        self._leading.discard(name)
        return lead

    def start_following(self, name: str, follow: Followership) -> None:
        replica = self._by_topic[name]
        assert replica.lead is None, f"{name!r} followed while it is led here"
        replica.follow = follow
        self._following.add(name)

    def stop_following(self, name: str) -> None:
        replica = self._by_topic.get(name)
        if replica is not None:
            replica.follow = None
        self._following.discard(name)

    def leading(self) -> list[str]:
        """The topics this shard leads, by name."""
        return sorted(self._leading)

    def following(self) -> list[str]:
        return list(self._following)

    def count(self, kind: ReplicaKind) -> int:
        if kind is ReplicaKind.LEADER:
            return len(self._leading)
        if kind is ReplicaKind.FOLLOWER:
            return len(self._following)
        return len(self._by_topic) - len(self._leading) - len(self._following)

    def follows_any(self) -> bool:
        return bool(self._following)

    def led(self) -> Iterator[tuple[str, Leadership]]:
        """(topic, leadership) of every topic this shard leads."""
        return ((name, self._by_topic[name].lead) for name in list(self._leading))

    def followed(self) -> Iterator[tuple[str, Followership]]:
        return ((name, self._by_topic[name].follow) for name in list(self._following))

    # --- what a commit hands on -----------------------------------------------------------

    def release(self, answer: Released) -> None:
        self._released.append(answer)

    def has_released(self) -> bool:
        return bool(self._released)

    def take_released(self) -> list[Released]:
        released, self._released = self._released, []
        return released

    def wake(self, name: str) -> None:
        """Wake `name`'s waiters at the next commit (a reader's topic, or an internal
        name: a parked fetch, a parked placement)."""
        self._woken.add(name)

    def take_woken(self) -> set[str]:
        woken, self._woken = self._woken, set()
        return woken
