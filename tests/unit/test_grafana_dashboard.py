"""The Grafana dashboard shipped in docs/grafana/ asks only for series the node exports: a
renamed metric fails here, not in an operator's empty panel."""

from __future__ import annotations

import json
import pathlib
import re

from topics_actors.gateway.engine_link import Census
from topics_actors.gateway.metrics_report import MetricsInput, metrics_text
from topics_actors.gateway.request_stats import RouteFigures

DASHBOARD = pathlib.Path(__file__).resolve().parents[2] / "docs/grafana/topics-dashboard.json"
_HISTOGRAM_PARTS = re.compile(r"_(bucket|sum|count)$")


def exported() -> set[str]:
    """Every series name of a metrics page with one topic, one queue and one route."""
    census = Census()
    census.add([{"topic": "t", "head_seq": 1, "earliest_seq": 1, "count": 1, "bytes": 3,
                 "durability": "disk", "queue": {"ready": 1, "in_flight": 0,
                                                 "dead_lettered": 0}}])
    wal = dict.fromkeys(("batches", "syncs", "records", "requests", "throttled",
                         "failed_batches"), 1)
    http = {"append": RouteFigures({"2xx": 1}, (1,) + (0,) * 20, 100)}
    text = metrics_text(MetricsInput(census, True, 1.0, 5, wal,
                                     {"sse_connections": 0, "watch_sessions": 0}, http))
    return {line.split("{")[0].split()[0] for line in text.decode().splitlines()
            if line and not line.startswith("#")}


def test_every_panel_queries_series_the_node_exports():
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported()
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\btopics_[a-z_]+", target["expr"])}
    assert queried and {n for n in queried if n not in names and
                        _HISTOGRAM_PARTS.sub("", n) + "_bucket" not in names} == set()
    assert {p["id"] for p in dashboard["panels"]} == set(range(1, len(dashboard["panels"]) + 1))
