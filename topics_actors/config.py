"""Configuration as data: the node's config from TOPICS_* environment variables (CLI flags
override them), and the frozen options of each kind of child process, built from it.

Every default of the node is written once, here.
The supervisor passes a child its options as one argument, `--options <JSON>`
(encode_options; the child reads it with decode_options): JSON so that `ps` shows what a
child runs with. Nothing secret may go there, since any local user can read a command
line: the gateway's settings, the API keys among them, stay in the environment that every
child inherits unchanged from the supervisor (gateway/gateway_settings.py), which reads and
checks them once before anything is spawned.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import typing

import orjson

DISK_FLUSH_INTERVAL_MS_DEFAULT = 10
WAL_FILE_BYTES_DEFAULT = 64 * 1024 * 1024   # storage/wal_writer.py's files
CHECKPOINT_WAL_BYTES_DEFAULT = 64 * 1024 * 1024     # compactor_server.Cadence's too
CHECKPOINT_INTERVAL_MS_DEFAULT = 60_000
SEGMENT_MAX_EVENTS_DEFAULT = 10_000             # compactor/segment_ledger.SegmentLimits' too
SEGMENT_MAX_BYTES_DEFAULT = 64 * 1024 * 1024
SEGMENT_MAX_AGE_MS_DEFAULT = 3_600_000          # 0 disables sealing by age
RESTART_MAX_DEFAULT = 10              # failed starts of one child in the window (restart_policy)
RESTART_WINDOW_MS_DEFAULT = 300_000


class ProcessRole(enum.StrEnum):
    """The kinds of child process a node runs (the `role` of every control message)."""
    SHARD = "shard"
    COMPACTOR = "compactor"
    RECLAIMER = "reclaimer"
    GATEWAY = "gateway"


class ProcessState(enum.StrEnum):
    """A child process's state: its own in its heartbeats (replaying, ready, stopping), and
    the supervisor's before the first and after the last (starting, down)."""
    STARTING = "starting"
    REPLAYING = "replaying"
    READY = "ready"
    STOPPING = "stopping"
    DOWN = "down"


class RecoveryPolicy(enum.StrEnum):
    """What a shard's recovery does with damage it finds (TOPICS_RECOVERY_ON_MISMATCH,
    docs/OPERATIONS.md 14): quarantine the topic and serve the rest, refuse readiness until
    it is repaired, or serve it as it is."""
    PARK = "park"
    REFUSE = "refuse"
    IGNORE = "ignore"


RECOVERY_POLICY_DEFAULT = RecoveryPolicy.PARK
_SINGLETON_ROLES = (ProcessRole.COMPACTOR, ProcessRole.RECLAIMER)


def _recovery_policy(env: dict) -> RecoveryPolicy:
    raw = env.get("TOPICS_RECOVERY_ON_MISMATCH", "").strip().lower()
    try:
        return RecoveryPolicy(raw) if raw else RECOVERY_POLICY_DEFAULT
    except ValueError:
        raise SystemExit(f"TOPICS_RECOVERY_ON_MISMATCH must be one of "
                         f"{', '.join(RecoveryPolicy)}, got {raw!r}") from None


def _int_env(env: dict, name: str, default: int | None) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from None


_NODE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def valid_node_id(node_id: str) -> bool:
    return _NODE_ID_RE.match(node_id) is not None


def split_host(text: str) -> tuple[str, int | None]:
    """TOPICS_HOST as the original reads it: a host, or `host:port` whose port then wins
    over TOPICS_PORT (`[v6]:port` for an IPv6 address; a bare IPv6 address has no port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        return text, None
    if not port:
        return host, None
    try:
        return host, int(port)
    except ValueError:
        raise SystemExit(f"TOPICS_HOST {text!r}: the port after ':' must be an integer")


def default_shards() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


_STORAGE_INTS = ("checkpoint_wal_bytes", "checkpoint_interval_ms", "segment_max_events",
                 "segment_max_bytes", "segment_max_age_ms", "reclaim_interval_ms",
                 "max_total_bytes", "hot_retain_segments", "hot_retain_bytes",
                 "gateway_workers",
                 "restart_max", "restart_window_ms")


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    data_dir: str = "./topics-data"
    host: str = "127.0.0.1"
    http_port: int = 4000
    zmq_port: int | None = None      # None: the HTTP port + 1 (front_port)
    port_file: str | None = None
    wal_shards: int = dataclasses.field(default_factory=default_shards)
    wal_file_bytes: int = WAL_FILE_BYTES_DEFAULT
    disk_flush_interval_ms: int = DISK_FLUSH_INTERVAL_MS_DEFAULT
    heartbeat_interval_ms: int = 500
    heartbeat_timeout_ms: int = 10_000
    stop_grace_ms: int = 10_000
    checkpoint_wal_bytes: int = CHECKPOINT_WAL_BYTES_DEFAULT
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT
    segment_max_events: int = SEGMENT_MAX_EVENTS_DEFAULT
    segment_max_bytes: int = SEGMENT_MAX_BYTES_DEFAULT
    segment_max_age_ms: int = SEGMENT_MAX_AGE_MS_DEFAULT
    reclaim_interval_ms: int = 5_000
    max_total_bytes: int = 0         # node-wide live-bytes quota; 0 = none
    cold_dir: str | None = None      # the cold tier for old sealed segments
    hot_retain_segments: int = 4     # sealed segments per topic kept in the hot tier
    hot_retain_bytes: int = 0        # and at most these bytes of them (0: no byte bound)
    gateway_workers: int = 1            # gateway processes sharing the HTTP port (0: none)
    restart_max: int = RESTART_MAX_DEFAULT          # 0: restart a failing child forever
    restart_window_ms: int = RESTART_WINDOW_MS_DEFAULT
    zk: str | None = None               # ZooKeeper connect string; None: a single node
    node_id: str | None = None          # this node's stable id in the cluster
    advertise_host: str | None = None   # how other nodes and clients reach this one
    zk_session_timeout_ms: int = 6_000
    recovery_on_mismatch: RecoveryPolicy = RECOVERY_POLICY_DEFAULT  # what recovery does with damage
    fork_server: bool = True         # fork children from a pre-imported process (fork_server)

    @classmethod
    def from_env(cls, env: dict | None = None) -> "NodeConfig":
        env = os.environ if env is None else env
        host, host_port = split_host(env.get("TOPICS_HOST") or cls.host)
        return cls(
            data_dir=env.get("TOPICS_DATA_DIR") or cls.data_dir,
            host=host,
            http_port=(host_port if host_port is not None
                       else _int_env(env, "TOPICS_PORT", cls.http_port)),
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
            zk=env.get("TOPICS_ZK", "").strip() or None,
            node_id=env.get("TOPICS_NODE_ID", "").strip() or None,
            advertise_host=env.get("TOPICS_ADVERTISE_HOST", "").strip() or None,
            zk_session_timeout_ms=_int_env(env, "TOPICS_ZK_SESSION_TIMEOUT_MS",
                                           cls.zk_session_timeout_ms),
            recovery_on_mismatch=_recovery_policy(env),
            fork_server=env.get("TOPICS_FORK_SERVER", "1").strip() not in ("0", "false"),
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
        if self.hot_retain_segments < 0 or self.hot_retain_bytes < 0:
            raise SystemExit("TOPICS_HOT_RETAIN_SEGMENTS and TOPICS_HOT_RETAIN_BYTES must not "
                             "be negative")
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
        if self.restart_max < 0 or self.restart_window_ms < 1:
            raise SystemExit("TOPICS_RESTART_MAX must not be negative (0 disables) and "
                             "TOPICS_RESTART_WINDOW_MS must be at least 1")
        self._validate_cluster()
        for name, port in (("TOPICS_PORT", self.http_port), ("TOPICS_ZMQ_PORT", self.zmq_port)):
            if port is not None and not 0 <= port <= 65535:
                raise SystemExit(f"{name} must be a TCP port (0 = pick a free one)")
        if self.front_port() > 65535:
            raise SystemExit("TOPICS_PORT 65535 leaves no port for the ZeroMQ front (the "
                             "next one); set TOPICS_ZMQ_PORT")

    def _validate_cluster(self) -> None:
        if not self.zk:
            return
        if not self.node_id or not valid_node_id(self.node_id):
            raise SystemExit("TOPICS_ZK needs TOPICS_NODE_ID: this node's stable id (letters, "
                             "digits, '.', '_', '-'; at most 64)")
        if self.advertised_host() in ("0.0.0.0", "::", ""):
            raise SystemExit("TOPICS_HOST is a wildcard: set TOPICS_ADVERTISE_HOST to the "
                             "address other nodes and clients use for this node")
        if not 500 <= self.zk_session_timeout_ms <= 60_000:
            raise SystemExit("TOPICS_ZK_SESSION_TIMEOUT_MS must be in 500..60000")

    def advertised_host(self) -> str:
        return self.advertise_host or self.host

    def front_port(self) -> int:
        """The ZeroMQ front's port: TOPICS_ZMQ_PORT, else the one after the HTTP port, so
        that nodes on one machine need only distinct HTTP ports (4000 -> 4001); any free
        port when the HTTP port is 0."""
        if self.zmq_port is not None:
            return self.zmq_port
        return self.http_port + 1 if self.http_port else 0


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """What a shard's core needs (ShardCore reads these names)."""

    data_dir: str
    shard: int
    shard_count: int
    wal_file_bytes: int = WAL_FILE_BYTES_DEFAULT
    disk_flush_interval_ms: int = DISK_FLUSH_INTERVAL_MS_DEFAULT
    background_prealloc: bool = True
    background_flush: bool = True   # the disk class's flush on a helper thread (wal_writer)
    quota_file: str | None = None   # the node's live-bytes slot file (byte_quota.py)
    max_total_bytes: int = 0
    cold_dir: str | None = None     # the cold tier, where old sealed segments may have moved
    recovery_on_mismatch: RecoveryPolicy = RECOVERY_POLICY_DEFAULT   # shard/quarantine_book.py
    node_id: str | None = None      # this node's id in a cluster (TOPICS_ZK); None: alone
    advertise_host: str = "127.0.0.1"   # how other nodes reach this shard's TCP port


# --- the options of each kind of child process -----------------------------------------------

@dataclasses.dataclass(frozen=True)
class ProcessOptions:
    """A child's place under the supervisor; every kind of child has one."""

    role: ProcessRole
    index: int
    heartbeat_interval_ms: int
    control: str | None = None      # the supervisor's control endpoint; None: unsupervised
    parent_pid: int = 0             # the supervisor, to die with; 0: none

    @property
    def log_name(self) -> str:
        """The process's name in its log lines: shard-NN, gateway-NN, compactor, reclaimer."""
        return self.role if self.role in _SINGLETON_ROLES else f"{self.role}-{self.index:02d}"


@dataclasses.dataclass(frozen=True)
class ShardProcessOptions:
    process: ProcessOptions
    shard: ShardOptions
    host: str
    port: int                       # 0: any free port (a restarted shard asks for its old one)
    ipc: str | None                 # the ipc:// path for the node's own processes


@dataclasses.dataclass(frozen=True)
class CompactorOptions:
    process: ProcessOptions
    front: str                      # the node's front endpoint (the shard map)
    data_dir: str
    cold_dir: str | None
    wal_file_bytes: int
    checkpoint_wal_bytes: int
    checkpoint_interval_ms: int
    segment_max_events: int
    segment_max_bytes: int
    segment_max_age_ms: int


@dataclasses.dataclass(frozen=True)
class ReclaimerOptions:
    process: ProcessOptions
    front: str
    data_dir: str
    cold_dir: str | None
    reclaim_interval_ms: int
    hot_retain_segments: int
    hot_retain_bytes: int


@dataclasses.dataclass(frozen=True)
class GatewayOptions:
    """The gateway's settings are not here but in the environment (see the module's doc)."""

    process: ProcessOptions
    front: str
    listen_fd: int                  # the bound, listening HTTP socket, inherited
    zmq_port: int                   # the front's port, published by GET /v0/health
    node_started_ms: int            # wall clock, for uptime_ms
    requests_file: str | None = None    # HTTP request counts, a slot per gateway (run dir)
    node_key_dir: str | None = None     # NodeWiring.node_key_dir


@dataclasses.dataclass(frozen=True)
class NodeWiring:
    """What the supervisor knows once its sockets are bound, for its children's options."""

    control: str                    # the control endpoint (ipc://)
    front: str                      # the front endpoint as the children reach it
    zmq_port: int
    run_dir: str                    # ipc sockets and the live-bytes slot file
    parent_pid: int
    started_ms: int
    node_key_dir: str | None = None  # a cluster node serving CURVE: its data dir, whose
                                     # key pair its gateways show other nodes' fronts

    @property
    def quota_file(self) -> str:
        return os.path.join(self.run_dir, "live-bytes")

    @property
    def requests_file(self) -> str:
        return os.path.join(self.run_dir, "http-requests")


def _process(cfg: NodeConfig, wiring: NodeWiring, role: ProcessRole,
             index: int) -> ProcessOptions:
    return ProcessOptions(role, index, cfg.heartbeat_interval_ms, wiring.control,
                          wiring.parent_pid)


def shard_process_options(cfg: NodeConfig, wiring: NodeWiring, index: int,
                          port: int) -> ShardProcessOptions:
    shard = ShardOptions(
        cfg.data_dir, index, cfg.wal_shards, cfg.wal_file_bytes, cfg.disk_flush_interval_ms,
        quota_file=wiring.quota_file if cfg.max_total_bytes else None,
        max_total_bytes=cfg.max_total_bytes, cold_dir=cfg.cold_dir,
        recovery_on_mismatch=cfg.recovery_on_mismatch,
        node_id=cfg.node_id if cfg.zk else None, advertise_host=cfg.advertised_host())
    return ShardProcessOptions(_process(cfg, wiring, ProcessRole.SHARD, index), shard, cfg.host,
                               port, os.path.join(wiring.run_dir, f"shard-{index:02d}.sock"))


def compactor_options(cfg: NodeConfig, wiring: NodeWiring) -> CompactorOptions:
    return CompactorOptions(
        _process(cfg, wiring, ProcessRole.COMPACTOR, 0), wiring.front, cfg.data_dir,
        cfg.cold_dir, cfg.wal_file_bytes, cfg.checkpoint_wal_bytes, cfg.checkpoint_interval_ms,
        cfg.segment_max_events, cfg.segment_max_bytes, cfg.segment_max_age_ms)


def reclaimer_options(cfg: NodeConfig, wiring: NodeWiring) -> ReclaimerOptions:
    return ReclaimerOptions(_process(cfg, wiring, ProcessRole.RECLAIMER, 0), wiring.front,
                            cfg.data_dir, cfg.cold_dir, cfg.reclaim_interval_ms,
                            cfg.hot_retain_segments, cfg.hot_retain_bytes)


def gateway_options(cfg: NodeConfig, wiring: NodeWiring, index: int,
                    listen_fd: int) -> GatewayOptions:
    return GatewayOptions(_process(cfg, wiring, ProcessRole.GATEWAY, index), wiring.front,
                          listen_fd, wiring.zmq_port, wiring.started_ms, wiring.requests_file,
                          wiring.node_key_dir)


# --- the one argument ---------------------------------------------------------------------------

T = typing.TypeVar("T")


def encode_options(options) -> str:
    """A child's options as the text of its `--options` argument."""
    return orjson.dumps(dataclasses.asdict(options)).decode()


def decode_options(kind: type[T], text: str) -> T:
    """The options of type `kind` from encode_options' text (nested options rebuilt)."""
    return _build(kind, orjson.loads(text))


def _build(kind, fields: dict):
    hints = _type_hints(kind)
    return kind(**{name: _field(hints[name], value) for name, value in fields.items()})


_HINTS: dict[type, dict] = {}


def _type_hints(kind: type) -> dict:
    """typing.get_type_hints, once per options type, and for the children's own types at
    import: it evaluates every annotation's text, and done in a child forked from the fork
    server it wrote to (and so copied) pages of typing's objects (docs/OPERATIONS.md 17)."""
    hints = _HINTS.get(kind)
    if hints is None:
        hints = _HINTS[kind] = typing.get_type_hints(kind)
        for hint in hints.values():
            if dataclasses.is_dataclass(hint):
                _type_hints(hint)
    return hints


for _kind in (ShardProcessOptions, CompactorOptions, ReclaimerOptions, GatewayOptions):
    _type_hints(_kind)


def _field(hint, value):
    """A field from its JSON: nested options rebuilt, a closed set's string checked."""
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value
