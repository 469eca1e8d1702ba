"""What a cluster node's shard waits on from the cluster (docs/CLUSTER.md): a topic to be
placed (or an unknown topic looked up), a config change of a placed topic, a deletion. The
shell sends each to the supervisor while it is wanted (shard_server.py); the answer comes
back in the next replication states (replica_book.py), which wake the request parked on it
(replica_rules.py).
"""

from __future__ import annotations

import enum
import time


class PlacementState(enum.Enum):
    """Where one topic's placement stands."""
    PLACING = "placing"          # the cluster is asked to place (create) the topic
    LOOKING_UP = "looking_up"    # the cluster is asked where an unknown topic is (no create)
    REFUSED = "refused"          # the cluster refused to place it (too few live nodes)
    ABSENT = "absent"            # a lookup: the cluster holds no topic of that name
    ARRIVED = "arrived"          # the topic's replication state arrived


_WAITING = (PlacementState.PLACING, PlacementState.LOOKING_UP)


class Placement:
    """One topic's request to the cluster for its state, and its outcome."""
    __slots__ = ("_state", "_config", "_reason", "asked_ns")

    def __init__(self, config: dict, create: bool, asked_ns: int):
        self._state = PlacementState.PLACING if create else PlacementState.LOOKING_UP
        self._config = config
        self._reason = ""
        self.asked_ns = asked_ns     # CLOCK_MONOTONIC: an answer read before is not its own

    @property
    def state(self) -> PlacementState:
        return self._state

    @property
    def config(self) -> dict:
        return self._config

    @property
    def create(self) -> bool:
        return self._state is not PlacementState.LOOKING_UP

    @property
    def waiting(self) -> bool:
        return self._state in _WAITING

    @property
    def reason(self) -> str:
        """Why the cluster refused it (REFUSED)."""
        return self._reason

    def _settle(self, state: PlacementState) -> None:
        assert self.waiting, f"a placement settled twice ({self._state} -> {state})"
        self._state = state

    def refuse(self, reason: str) -> None:
        self._settle(PlacementState.REFUSED)
        self._reason = reason

    def find_absent(self) -> None:
        assert self._state is PlacementState.LOOKING_UP, "only a lookup finds no topic"
        self._settle(PlacementState.ABSENT)

    def arrive(self) -> None:
        self._settle(PlacementState.ARRIVED)


class Placements:
    """Per topic: its placement, the config a put_topic waits for, whether a delete_topic
    waits for its deletion; and the topics whose waiting requests to wake at the next
    commit."""

    def __init__(self):
        self._placements: dict[str, Placement] = {}
        self._configs: dict[str, dict] = {}
        self._deleting: set[str] = set()
        self._woken: set[str] = set()

    # --- asked by requests (replica_rules.py) ---------------------------------------------

    def ask(self, name: str, config: dict, create: bool, asked_ns: int | None = None) -> None:
        """Have the cluster place `name` (`create`), or tell where it is (a new ask
        replaces an earlier one and its outcome)."""
        self._placements[name] = Placement(config, create, time.monotonic_ns()
                                           if asked_ns is None else asked_ns)

    def asked(self, name: str) -> Placement | None:
        """`name`'s placement, waiting or answered (not yet taken)."""
        return self._placements.get(name)

    def take(self, name: str) -> Placement | None:
        """`name`'s placement, forgotten (its waiting request answers now)."""
        return self._placements.pop(name, None)

    def settled(self, name: str) -> bool:
        placement = self._placements.get(name)
        return placement is not None and not placement.waiting

    def want_config(self, name: str, config: dict) -> None:
        self._configs[name] = config

    def forget_config(self, name: str) -> None:
        self._configs.pop(name, None)

    def config_wanted(self, name: str) -> dict | None:
        return self._configs.get(name)

    def want_deleted(self, name: str) -> None:
        self._deleting.add(name)

    def forget_deletion(self, name: str) -> None:
        self._deleting.discard(name)

    def deletion_wanted(self, name: str) -> bool:
        return name in self._deleting

    # --- answered by the cluster (replica_book.py) ----------------------------------------

    def arrived(self, name: str) -> None:
        """`name`'s state arrived: a placement or lookup waiting for it is answered."""
        placement = self._placements.get(name)
        if placement is not None and placement.waiting:
            placement.arrive()
            self._woken.add(name)

    def refused(self, name: str, reason: str) -> None:
        placement = self._placements.get(name)
        if placement is not None and placement.waiting:
            placement.refuse(reason)
            self._woken.add(name)

    def absent(self, name: str, asked_ns: int) -> None:
        """The cluster had no state of `name` when it read it for a lookup asked at
        `asked_ns`: a lookup asked no later is answered (a newer one, asked perhaps after
        another node's create was answered, waits for its own read)."""
        placement = self._placements.get(name)
        if (placement is not None and placement.state is PlacementState.LOOKING_UP
                and asked_ns >= placement.asked_ns):
            placement.find_absent()
            self._woken.add(name)

    def wake(self, name: str) -> None:
        """A config change or a deletion `name`'s request waits for has come."""
        self._woken.add(name)

    def take_woken(self) -> set[str]:
        woken, self._woken = self._woken, set()
        return woken

    # --- sent by the shell ----------------------------------------------------------------

    def to_place(self) -> list[tuple[str, dict, bool, int]]:
        """(topic, config, create, asked_ns) of every placement or lookup still waiting."""
        return [(name, p.config, p.create, p.asked_ns) for name, p in self._placements.items()
                if p.waiting]

    def changes(self) -> list[tuple[str, dict]]:
        """(topic, change) of every config change and deletion a request waits for."""
        return ([(name, {"config": config}) for name, config in self._configs.items()]
                + [(name, {"delete": True}) for name in self._deleting])
