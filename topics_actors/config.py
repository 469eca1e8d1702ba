"""Node configuration from TOPICS_* environment variables (CLI flags override them)."""

from __future__ import annotations

import dataclasses
import os

from topics_actors.storage.wal_writer import WAL_FILE_BYTES_DEFAULT


def _int_env(env: dict, name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from None


def default_shards() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


_STORAGE_INTS = ("checkpoint_wal_bytes", "checkpoint_interval_ms", "segment_max_events",
                 "segment_max_bytes", "segment_max_age_ms", "reclaim_interval_ms",
                 "max_total_bytes", "hot_retain_segments", "gateway_workers")


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    data_dir: str = "./topics-data"
    host: str = "127.0.0.1"
    http_port: int = 4000
    zmq_port: int = 4001
    port_file: str | None = None
    wal_shards: int = dataclasses.field(default_factory=default_shards)
    wal_file_bytes: int = 64 * 1024 * 1024
    disk_flush_interval_ms: int = 10
    heartbeat_interval_ms: int = 500
    heartbeat_timeout_ms: int = 10_000
    stop_grace_ms: int = 10_000
    checkpoint_wal_bytes: int = 64 * 1024 * 1024
    checkpoint_interval_ms: int = 60_000
    segment_max_events: int = 10_000
    segment_max_bytes: int = 64 * 1024 * 1024
    segment_max_age_ms: int = 3_600_000
    reclaim_interval_ms: int = 5_000
    max_total_bytes: int = 0         # node-wide live-bytes quota; 0 = none
    cold_dir: str | None = None      # the cold tier for old sealed segments
    hot_retain_segments: int = 4     # sealed segments per topic kept in the hot tier
    gateway_workers: int = 1            # gateway processes sharing the HTTP port (0: none)

    @classmethod
    def from_env(cls, env: dict | None = None) -> "NodeConfig":
        env = os.environ if env is None else env
        return cls(
            data_dir=env.get("TOPICS_DATA_DIR") or cls.data_dir,
            host=env.get("TOPICS_HOST") or cls.host,
            http_port=_int_env(env, "TOPICS_PORT", cls.http_port),
            zmq_port=_int_env(env, "TOPICS_ZMQ_PORT", cls.zmq_port),
            port_file=env.get("TOPICS_PORT_FILE") or None,
            wal_shards=_int_env(env, "TOPICS_WAL_SHARDS", default_shards()),
            wal_file_bytes=_int_env(env, "TOPICS_WAL_FILE_BYTES", cls.wal_file_bytes),
            disk_flush_interval_ms=_int_env(env, "TOPICS_DISK_FLUSH_INTERVAL_MS",
                                            cls.disk_flush_interval_ms),
            heartbeat_interval_ms=_int_env(env, "TOPICS_HEARTBEAT_INTERVAL_MS",
                                           cls.heartbeat_interval_ms),
            heartbeat_timeout_ms=_int_env(env, "TOPICS_HEARTBEAT_TIMEOUT_MS",
                                          cls.heartbeat_timeout_ms),
            stop_grace_ms=_int_env(env, "TOPICS_STOP_GRACE_MS", cls.stop_grace_ms),
            cold_dir=env.get("TOPICS_COLD_DIR") or None,
            **{name: _int_env(env, f"TOPICS_{name.upper()}", getattr(cls, name))
               for name in _STORAGE_INTS},
        )

    def validate(self) -> None:
        if not 1 <= self.wal_shards <= 64:
            raise SystemExit(f"TOPICS_WAL_SHARDS must be in 1..64, got {self.wal_shards}")
        if self.wal_file_bytes < 1024 * 1024:
            raise SystemExit("TOPICS_WAL_FILE_BYTES must be at least 1 MiB")
        for name in ("checkpoint_wal_bytes", "checkpoint_interval_ms", "segment_max_events",
                     "segment_max_bytes", "reclaim_interval_ms"):
            if getattr(self, name) < 1:
                raise SystemExit(f"TOPICS_{name.upper()} must be at least 1")
        if self.hot_retain_segments < 0:
            raise SystemExit("TOPICS_HOT_RETAIN_SEGMENTS must not be negative")
        if self.cold_dir and os.path.realpath(self.cold_dir) == os.path.realpath(self.data_dir):
            raise SystemExit("TOPICS_COLD_DIR must not be the data directory")
        if self.max_total_bytes < 0:
            raise SystemExit("TOPICS_MAX_TOTAL_BYTES must not be negative (0 disables)")
        if not 0 <= self.gateway_workers <= 64:
            raise SystemExit("TOPICS_GATEWAY_WORKERS must be in 0..64")
        if not 0 <= self.segment_max_age_ms:
            raise SystemExit("TOPICS_SEGMENT_MAX_AGE_MS must not be negative (0 disables)")
        if self.segment_max_bytes >= 1 << 32:
            raise SystemExit("TOPICS_SEGMENT_MAX_BYTES must be below 4 GiB (.idx offsets are u32)")
        for name in ("http_port", "zmq_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise SystemExit(f"{name} must be a TCP port (0 = pick a free one)")


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    data_dir: str
    shard: int
    shard_count: int
    wal_file_bytes: int = WAL_FILE_BYTES_DEFAULT
    disk_flush_interval_ms: int = 10
    background_prealloc: bool = True
    quota_file: str | None = None   # the node's live-bytes slot file (byte_quota.py)
    max_total_bytes: int = 0
    cold_dir: str | None = None     # the cold tier, where old sealed segments may have moved
