"""The soak's knobs, its topics and the node's settings, as one frozen value (it crosses
into the load process).

Log topics are `soak-<class>-<n>`, `topics_per_class` of each durability class in
`classes`, every one capped at `cap` records; one in four is written with tags (`keep`,
and `drop` on one record in four) so that deletes by tag have something to find. Queues
are `soak-queue-<n>` (disk, capped). Every producer writes to every topic, starting at its
own offset, as independent programs appending to a shared set of topics would.
"""

from __future__ import annotations

import dataclasses

from topics_actors.config import WAL_FILE_BYTES_DEFAULT

CLASSES = ("fsync", "disk", "memory", "ephemeral")

# Checkpoints every 2 s or 4 MiB of WAL and retention every second: a run of a minute sees
# tens of checkpoints, as an hour with the defaults does.
FAST_NODE_ENV = {"TOPICS_CHECKPOINT_INTERVAL_MS": "2000",
                 "TOPICS_CHECKPOINT_WAL_BYTES": str(4 << 20),
                 "TOPICS_WAL_FILE_BYTES": str(4 << 20),
                 "TOPICS_RECLAIM_INTERVAL_MS": "1000"}


@dataclasses.dataclass(frozen=True)
class SoakPlan:
    minutes: float = 60.0
    seed: int = 1
    shards: int = 2
    classes: tuple[str, ...] = CLASSES
    topics_per_class: int = 50
    queues: int = 4
    cap: int = 20_000
    record_bytes: int = 100
    batch: int = 10
    producers: int = 8
    produce_pause_s: float = 0.0
    watchers: int = 100
    workers: int = 4
    routers: int = 2
    visit_s: tuple[float, float] = (2.0, 10.0)   # how long a watcher or worker stays
    delete_every_s: float = 2.0
    router_life_s: float = 10.0
    churn_every_s: float = 5.0
    sample_s: float = 10.0
    idle_s: float = 5.0               # the idle node is sampled over this long
    bound_bytes: float = 20.0         # anonymous bytes per retained record, at most
    fast: bool = False                # FAST_NODE_ENV

    def log_topics(self) -> list[tuple[str, bool]]:
        """(name, tagged) of every log topic."""
        return [(f"soak-{cls}-{n}", n % 4 == 3) for cls in self.classes
                for n in range(self.topics_per_class)]

    def queue_topics(self) -> list[str]:
        return [f"soak-queue-{n}" for n in range(self.queues)]

    def producer_topics(self, index: int) -> list[tuple[str, bool]]:
        topics = self.log_topics() + [(name, False) for name in self.queue_topics()]
        start = (index * len(topics)) // max(self.producers, 1)
        return topics[start:] + topics[:start]

    def node_env(self) -> dict[str, str]:
        return dict(FAST_NODE_ENV) if self.fast else {}

    def wal_file_bytes(self) -> int:
        return int(FAST_NODE_ENV["TOPICS_WAL_FILE_BYTES"]) if self.fast else WAL_FILE_BYTES_DEFAULT

    def durability(self, name: str) -> str:
        cls = name.split("-")[1]
        return cls if cls in CLASSES else "disk"
