"""Turn per-run results into the markdown report: setup, one table of medians, the ratios."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys

from bench_stats import fmt_ms, fmt_rate, fmt_spread, paired_ratios, ratio, spread

CLASSES = ("ephemeral", "memory", "disk", "fsync")


def _fmt_x(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}×"


def fmt_n(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1f}"


def _fmt_pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.0f}%"


def engine_commit() -> str:
    """The repository's HEAD (short), plus '+dirty' if tracked engine files were modified."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no",
                                "--", "topics_actors", "supervisor"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def cases(args) -> list[tuple[str, float, str]]:
    """(shape, client linger_ms, key suffix) of each measured case: the single shape once
    per --linger-ms value (suffix "" for 0, "+linger<L>ms" otherwise), the batch shape once."""
    out = []
    for shape in args.shapes:
        for linger_ms in (args.linger_ms if shape == "single" else [0]):
            out.append((shape, linger_ms, f"+linger{linger_ms:g}ms" if linger_ms else ""))
    return out


def describe_setup(args, redis_note: str, elapsed_s: float) -> dict:
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "engine_commit": engine_commit(),
            "cpus": os.cpu_count(), "shards": args.shards, "client_procs": args.client_procs,
            "producers": args.producers, "batch": args.batch,
            "batch_in_flight": args.batch_window * args.client_procs, "runs": args.runs,
            "seconds": args.seconds, "warmup": args.warmup, "redis": redis_note,
            "linger_ms": getattr(args, "linger_ms", [0]),   # append_bench's option alone
            "elapsed_s": round(elapsed_s, 1), "argv": " ".join(sys.argv)}


def series(runs: list[dict], key: str, field: str) -> list[float]:
    return [r[key].get(field, math.nan) if key in r else math.nan for r in runs]


def _redis_series(runs: list[dict], case: str, field: str) -> list[float]:
    return [r["redis"].get(case, {}).get(field, math.nan) if "redis" in r else math.nan
            for r in runs]


def row(name: str, rate: list, p50: list, p99: list, extra: list[str]) -> str:
    cells = [name, fmt_spread(spread(rate)), fmt_spread(spread(p50), fmt_ms),
             fmt_spread(spread(p99), fmt_ms), *extra]
    return "| " + " | ".join(cells) + " |"


def cores(runs: list[dict], key: str) -> str:
    parts = [spread(series(runs, key, f))["median"]
             for f in ("server_cpu", "client_cpu", "other_cpu")]
    return " / ".join("n/a" if math.isnan(p) else f"{p:.2f}" for p in parts)


def topics_rows(args, runs: list[dict]) -> list[str]:
    rows = []
    labels = {"single": f"1 rec/append, {args.producers} producers",
              "batch": f"{args.batch} rec/append, {args.batch_window * args.client_procs} "
                       f"in flight"}
    for shape, linger_ms, suffix in cases(args):
        label = labels[shape] + (f", client linger {linger_ms:g} ms" if linger_ms else "")
        for cls in args.classes:
            key = f"{cls}/{shape}{suffix}"
            extra = [fmt_ms(spread(series(runs, key, "server_p50_ms"))["median"]),
                     fmt_spread(spread(series(runs, key, "records_per_sync")), fmt_n),
                     cores(runs, key),
                     str(sum(int(r[key]["errors"]) for r in runs if key in r))]
            rows.append(row(f"topics `{cls}`, {label}", series(runs, key, "records_per_s"),
                            series(runs, key, "p50_ms"), series(runs, key, "p99_ms"),
                            extra))
    return rows


def peer_rows(runs: list[dict]) -> list[str]:
    rows = [row("fdatasync floor, 4 KiB pwrite on a pre-zeroed file (ops/s)",
                series(runs, "floor", "ops_per_s"), series(runs, "floor", "p50_ms"),
                series(runs, "floor", "p99_ms"), ["", "", "", ""])]
    if not any("redis" in r for r in runs):
        return rows
    for mode in ("always", "everysec"):
        for pipeline in (1, 64):
            case = f"{mode}_P{pipeline}"
            rows.append(row(f"Redis XADD, `appendfsync {mode}`, -c 50 -P {pipeline} (ops/s)",
                            _redis_series(runs, case, "ops_per_s"),
                            _redis_series(runs, case, "p50_ms"),
                            _redis_series(runs, case, "p99_ms"), ["", "", "", ""]))
    return rows


def table(args, runs: list[dict]) -> str:
    head = ["| case | records/s (or ops/s), median (min–max) | ack p50 | ack p99 | "
            "server-side p50 | records per fsync | cores: server / client / other | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    return "\n".join(head + topics_rows(args, runs) + peer_rows(runs))


def ratio_line(label: str, num: list[float], den: list[float]) -> str:
    med = ratio(spread(num)["median"], spread(den)["median"])
    per_run = spread(paired_ratios(num, den))
    return (f"- {label}: **{_fmt_x(med)}** (ratio of medians; same-run ratios "
            f"{_fmt_x(per_run['min'])}–{_fmt_x(per_run['max'])}, n={per_run['n']})")


def ratios(args, runs: list[dict]) -> str:
    lines = []
    if "fsync" in args.classes:
        batch = series(runs, "fsync/batch", "records_per_s")
        lines.append(ratio_line("topics `fsync` batched appends, records/s ÷ Redis "
                                "`appendfsync always` -P 64 XADD ops/s", batch,
                                _redis_series(runs, "always_P64", "ops_per_s")))
        single = series(runs, "fsync/single", "records_per_s")
        lines.append(ratio_line("topics `fsync` single-record acks/s ÷ Redis "
                                "`appendfsync always` -P 1 XADD ops/s", single,
                                _redis_series(runs, "always_P1", "ops_per_s")))
        lines.append(ratio_line("topics `fsync` single-record ack p50 ÷ fdatasync floor p50",
                                series(runs, "fsync/single", "p50_ms"),
                                series(runs, "floor", "p50_ms")))
        wpf = spread(series(runs, "fsync/single", "records_per_sync"))
        lines.append(f"- writes per fsync, `fsync` class, {args.producers} single-record "
                     f"producers: **{fmt_spread(wpf, fmt_n)}**")
        bpf = spread(series(runs, "fsync/batch", "records_per_sync"))
        lines.append(f"- records per fsync, `fsync` class, batched: {fmt_spread(bpf, fmt_n)}")
        for _, linger_ms, suffix in cases(args):
            if linger_ms:
                lines.append(ratio_line(f"topics `fsync` single-record acks/s, client linger "
                                        f"{linger_ms:g} ms ÷ linger off",
                                        series(runs, f"fsync/single{suffix}", "records_per_s"),
                                        single))
    return "\n".join(lines)


def anomalies(runs: list[dict]) -> list[str]:
    """Errors, shard restarts and ack stalls (> 1 s without any ack) per run and case."""
    lines = []
    for number, run in enumerate(runs):
        for key, res in run.items():
            if not isinstance(res, dict) or "records_per_s" not in res:
                continue
            notes = []
            if res.get("fatal") or res.get("last_error"):
                notes.append(f"error: {res.get('fatal') or res.get('last_error')}")
            if res.get("shard_restarts"):
                notes.append(f"{res['shard_restarts']} shard restart(s)")
            if res.get("longest_ack_gap_s", 0) > 1.0:
                notes.append(f"no ack for {res['longest_ack_gap_s']:.1f} s")
            if notes:
                lines.append(f"- run {number} {key}: " + "; ".join(notes))
    return lines


def render(args, meta: dict, runs: list[dict]) -> str:
    setup = (f"engine commit {meta['engine_commit']}; "
             f"shards={meta['shards']}, client processes={meta['client_procs']}, "
             f"runs={meta['runs']}, window={meta['seconds']} s (+{meta['warmup']} s warm-up), "
             f"payload 100 B JSON, Python {meta['python']}, {meta['cpus']} CPUs; "
             f"Redis: {meta['redis']}; elapsed {meta['elapsed_s']} s")
    parts = ["## Append benchmark", "", f"`{meta['argv']}`", "", setup, "", table(args, runs),
             "", "### Ratios", "", ratios(args, runs)]
    problems = anomalies(runs)
    if problems:
        parts += ["", "### Anomalies", "", *problems[:30]]
    return "\n".join(parts) + "\n"
