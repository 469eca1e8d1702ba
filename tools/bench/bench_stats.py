"""Small statistics helpers: percentiles of one run, medians and ranges across runs."""

from __future__ import annotations

import math
import statistics
from typing import Iterable


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted list; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(samples_s: Iterable[float]) -> dict:
    """p50/p99/count of latency samples given in seconds, reported in milliseconds."""
    values = sorted(samples_s)
    return {"p50_ms": percentile(values, 50) * 1e3, "p99_ms": percentile(values, 99) * 1e3,
            "samples": len(values)}


def spread(values: Iterable[float]) -> dict:
    """Median and min-max of one figure across runs (NaNs, i.e. failed runs, left out)."""
    clean = [v for v in values if v is not None and not math.isnan(v)]
    if not clean:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean),
            "n": len(clean)}


def ratio(numerator: float, denominator: float) -> float:
    if not denominator or math.isnan(denominator) or math.isnan(numerator):
        return math.nan
    return numerator / denominator


def paired_ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Ratios of figures measured in the same run (index i with index i)."""
    return [ratio(n, d) for n, d in zip(numerators, denominators)]


def fmt_rate(value: float) -> str:
    """Records or ops per second, compact: 1.23 M, 45.6 K, 789."""
    if value is None or math.isnan(value):
        return "n/a"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e4:
        return f"{value / 1e3:.1f} K"
    if value >= 1e3:
        return f"{value / 1e3:.2f} K"
    return f"{value:.0f}"


def fmt_ms(value: float) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if value < 1:
        return f"{value * 1e3:.0f} µs"
    return f"{value:.2f} ms"


def fmt_spread(stat: dict, fmt=fmt_rate) -> str:
    """'median (min–max)', or just the median for a single run."""
    if stat["n"] == 0:
        return "n/a"
    if stat["n"] == 1:
        return fmt(stat["median"])
    return f"{fmt(stat['median'])} ({fmt(stat['min'])}–{fmt(stat['max'])})"
