"""/v0/metrics (spec/api.md 10): Prometheus text exposition 0.0.4, or JSON on request.

Routers, their forwarded records, watch sessions and SSE streams are the node's, summed over
the shards that keep them (a router is kept by its destination's shard). `wal` sums the
shards' statistics (batches, syncs, records, requests, throttled, failed_batches). HTTP
requests and their latency are the node's, summed over the gateways (request_stats.py).
"""

from __future__ import annotations

import dataclasses
import itertools

import orjson

from topics_actors.gateway.engine_link import Census
from topics_actors.gateway.quarantine_api import Survey
from topics_actors.gateway.replication_report import Replication
from topics_actors.gateway.request_stats import BOUNDS_US, RouteFigures
from topics_actors.shard.shard_stats import FSYNC_BOUNDS_US, FSYNC_BUCKET_KEYS

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
_STREAM_GAUGES = {"sse_connections": "open SSE streams (watch, work) and WebSockets on the node",
                  "watch_sessions": "live watch sessions on the node"}


@dataclasses.dataclass(frozen=True)
class MetricsInput:
    census: Census
    ready: bool
    replay_progress: float
    uptime_ms: int
    wal: dict                # summed shard statistics; empty when no shard answered
    streams: dict = dataclasses.field(default_factory=dict)   # sse_connections, watch_sessions
    http: dict = dataclasses.field(default_factory=dict)      # route -> RouteFigures
    gateway: int = 0         # the index of the gateway that answers
    routers: dict = dataclasses.field(default_factory=dict)   # routers, routers_forwarded
    quarantine: Survey = dataclasses.field(default_factory=Survey)   # recovery quarantine
    replication: Replication = dataclasses.field(default_factory=Replication)   # clusters
    # How the answering gateway's watch streams got their pages: read from a shard, shared
    # with another stream, taken from a commit notification (by a waking stream or
    # written straight to a waiting one).
    watch_pages: dict = dataclasses.field(default_factory=dict)


def _cumulative(figures: RouteFigures) -> list[int]:
    return list(itertools.accumulate(figures.buckets))


def http_json(m: MetricsInput) -> dict:
    """The JSON form of the request series: per route, requests per status class and the
    latency histogram (cumulative counts per upper bound in ms, like Prometheus' `le`)."""
    bounds = [f"{us / 1000:g}" for us in BOUNDS_US] + ["+Inf"]
    return {
        "answered_by_gateway": m.gateway,
        "requests_total": sum(f.count for f in m.http.values()),
        "requests": {route: f.statuses for route, f in m.http.items()},
        "latency": {route: {"count": f.count, "sum_ms": f.sum_us / 1000,
                            "buckets_ms": dict(zip(bounds, _cumulative(f)))}
                    for route, f in m.http.items()}}


def metrics_json(m: MetricsInput) -> dict:
    c = m.census
    body = {"topics": c.topics, **{f"topics_{k}": v for k, v in c.by_class.items()},
            "routers": m.routers.get("routers", 0),
            "routers_forwarded": m.routers.get("routers_forwarded", 0),
            "records_live": c.records_live, "bytes_live": c.bytes_live,
            "queue_topics": c.queue_topics,
            "queue_leases_in_flight": c.queue_leases_in_flight,
            "sse_connections": m.streams.get("sse_connections", 0),
            "watch_sessions": m.streams.get("watch_sessions", 0), "ready": m.ready,
            "replay_progress": m.replay_progress, "uptime_ms": m.uptime_ms,
            "recovery_quarantined": len(m.quarantine.entries),
            "recovery_quarantines_total": m.quarantine.total}
    if m.wal:
        body["wal"] = m.wal
    if m.replication.enabled:
        body["replication"] = {**m.replication.counts, "led": m.replication.led}
    body["http"] = http_json(m)
    body["watch_pages"] = {"answered_by_gateway": m.gateway, **m.watch_pages}
    return body


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _gauge(lines: list[str], name: str, value, help_text: str) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]


def _topic_series(lines: list[str], c: Census) -> None:
    for field, key in (("head_seq", "head_seq"), ("earliest_seq", "earliest_seq"),
                       ("records_live", "count"), ("bytes_live", "bytes")):
        name = f"topics_topic_{field}"
        lines += [f"# HELP {name} per topic {field} (first 1000 topics by name)",
                  f"# TYPE {name} gauge"]
        lines += [f'{name}{{topic="{_label(t["topic"])}"}} {t[key]}' for t in c.series]
    for field in ("ready", "in_flight"):
        name = f"topics_topic_queue_{field}"
        lines += [f"# HELP {name} per queue topic {field} jobs (first 1000 topics by name)",
                  f"# TYPE {name} gauge"]
        lines += [f'{name}{{topic="{_label(t["topic"])}"}} {t["queue"][field]}'
                  for t in c.series if "queue" in t]
    _gauge(lines, "topics_topic_metrics_truncated", int(c.truncated),
           "1 when per-topic series were cut at 1000 topics")


def _http_series(lines: list[str], http: dict) -> None:
    name = "topics_http_requests_total"
    lines += [f"# HELP {name} HTTP requests answered by the node's gateways, by route "
              "(handler) and status class", f"# TYPE {name} counter"]
    lines += [f'{name}{{route="{route}",status="{label}"}} {n}'
              for route, f in http.items() for label, n in f.statuses.items()]
    name = "topics_http_request_duration_seconds"
    lines += [f"# HELP {name} time from a request read to its response ready, by route",
              f"# TYPE {name} histogram"]
    bounds = [f"{us / 1e6:g}" for us in BOUNDS_US] + ["+Inf"]
    for route, f in http.items():
        lines += [f'{name}_bucket{{route="{route}",le="{le}"}} {n}'
                  for le, n in zip(bounds, _cumulative(f))]
        lines += [f'{name}_sum{{route="{route}"}} {f.sum_us / 1e6}',
                  f'{name}_count{{route="{route}"}} {f.count}']


def metrics_text(m: MetricsInput) -> bytes:
    c, lines = m.census, []
    _gauge(lines, "topics_topics", c.topics, "topics on the node")
    lines += ["# HELP topics_topics_by_class topics per durability class",
              "# TYPE topics_topics_by_class gauge"]
    lines += [f'topics_topics_by_class{{class="{k}"}} {v}' for k, v in c.by_class.items()]
    _gauge(lines, "topics_records_live", c.records_live, "live records")
    _gauge(lines, "topics_bytes_live", c.bytes_live, "live payload bytes (data + meta)")
    _topic_series(lines, c)
    _gauge(lines, "topics_queue_topics", c.queue_topics, "queue topics")
    _gauge(lines, "topics_queue_leases_in_flight", c.queue_leases_in_flight,
           "un-expired leases on live jobs")
    _gauge(lines, "topics_routers", m.routers.get("routers", 0), "routers on the node")
    name = "topics_router_forwarded_total"
    lines += [f"# HELP {name} records copied by the node's routers (a deleted router's "
              "count leaves the sum)", f"# TYPE {name} counter",
              f"{name} {m.routers.get('routers_forwarded', 0)}"]
    for name, help_text in _STREAM_GAUGES.items():
        _gauge(lines, f"topics_{name}", m.streams.get(name, 0), help_text)
    _gauge(lines, "topics_ready", int(m.ready), "1 once every shard has replayed")
    _gauge(lines, "topics_recovery_progress", m.replay_progress, "replay progress, 0..1")
    _gauge(lines, "topics_recovery_quarantined", len(m.quarantine.entries),
           "topics recovery quarantined, not yet repaired")
    lines += ["# HELP topics_recovery_quarantines_total topics recovery quarantined since "
              "each shard started", "# TYPE topics_recovery_quarantines_total counter",
              f"topics_recovery_quarantines_total {m.quarantine.total}"]
    _gauge(lines, "topics_uptime_ms", m.uptime_ms, "milliseconds since the node started")
    _wal_series(lines, m.wal)
    if m.replication.enabled:
        _replication_series(lines, m.replication)
    _http_series(lines, m.http)
    name = "topics_watch_pages_total"
    lines += [f"# HELP {name} pages of the answering gateway's watch streams, by source",
              f"# TYPE {name} counter"]
    lines += [f'{name}{{gateway="{m.gateway}",source="{source}"}} {n}'
              for source, n in m.watch_pages.items()]
    return ("\n".join(lines) + "\n").encode()


# The original's WAL series where its name differs from ours: (its name, our statistic).
# It counts a frame per record; this engine writes a batch as one frame, so its records
# stand for the original's frames (docs/HTTP.md 11).
_ORIGINAL_WAL_NAMES = (("frames", "records"), ("fsyncs", "syncs"),
                       ("submit_full", "throttled"))


def _wal_series(lines: list[str], wal: dict) -> None:
    """Our `topics_wal_<statistic>_total` counters, the original's names beside them, and
    the fdatasync latency histogram (`topics_wal_fsync_latency_us`, its buckets)."""
    histogram = set(FSYNC_BUCKET_KEYS) | {"fsync_us_sum"}
    for key, value in sorted(wal.items()):
        if key not in histogram:
            name = f"topics_wal_{key}_total"
            lines += [f"# HELP {name} shard {key} since each shard started",
                      f"# TYPE {name} counter", f"{name} {value}"]
    if not wal:
        return
    for theirs, ours in _ORIGINAL_WAL_NAMES:
        name = f"topics_wal_{theirs}_total"
        lines += [f"# HELP {name} the original's name of topics_wal_{ours}_total",
                  f"# TYPE {name} counter", f"{name} {wal.get(ours, 0)}"]
    name = "topics_wal_fsync_latency_us"
    counts = list(itertools.accumulate(wal.get(k, 0) for k in FSYNC_BUCKET_KEYS))
    lines += [f"# HELP {name} WAL fdatasync latency (microseconds)",
              f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{le="{le}"}} {n}'
              for le, n in zip([*map(str, FSYNC_BOUNDS_US), "+Inf"], counts)]
    lines += [f"{name}_sum {wal.get('fsync_us_sum', 0)}", f"{name}_count {counts[-1]}"]


def _replication_series(lines: list[str], r: Replication) -> None:
    """A cluster node's replication (docs/CLUSTER.md): counts, and per topic it leads the
    ISR size and each follower's lag in records."""
    _gauge(lines, "topics_replicated_topics", r.counts["replicated_topics"],
           "replicated topics whose shard is on this node")
    _gauge(lines, "topics_leader_topics", r.counts["leading"], "replicated topics led here")
    _gauge(lines, "topics_under_replicated_topics", r.counts["under_replicated"],
           "topics led here with fewer in-sync replicas than replicas")
    for name, key, what in (
            ("topics_leader_changes_total", "leader_changes",
             "times this node's shards took a topic's leadership"),
            ("topics_replica_truncations_total", "copies_truncated",
             "diverged copies cut back in place (docs/CLUSTER.md 6)"),
            ("topics_replica_resets_total", "copies_reset",
             "diverged copies dropped and fetched again whole (docs/CLUSTER.md 6)")):
        lines += [f"# HELP {name} {what} since this node's shards started",
                  f"# TYPE {name} counter", f"{name} {r.counts[key]}"]
    name = "topics_topic_isr_size"
    lines += [f"# HELP {name} in-sync replicas per topic led here", f"# TYPE {name} gauge"]
    lines += [f'{name}{{topic="{_label(t)}"}} {v["isr"]}' for t, v in sorted(r.led.items())]
    name = "topics_follower_lag_records"
    lines += [f"# HELP {name} records a follower lacks of the leader's log, per topic led "
              "here", f"# TYPE {name} gauge"]
    lines += [f'{name}{{topic="{_label(t)}",node="{_label(n)}"}} {lag}'
              for t, v in sorted(r.led.items()) for n, lag in sorted(v["lag"].items())]


def wants_json(accept: str | None) -> bool:
    return bool(accept) and "application/json" in accept.lower()


def render(m: MetricsInput, accept: str | None) -> tuple[bytes, str]:
    if wants_json(accept):
        return orjson.dumps(metrics_json(m)), "application/json"
    return metrics_text(m), PROMETHEUS
