"""`topics bench`, like `nats bench`: producers append to a fresh topic over HTTP while
consumers read it, with a live progress line; then the rates and the latency percentiles.

Each producer and consumer is a thread with its own keep-alive connection. A record's data
carries its send time, so a consumer measures append-to-read latency on one clock. The
figures include this Python client's own cost: use tools/bench for the engine's."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import click

from topics_actors.cli.exit_code import ExitCode
from topics_actors.cli.http_api import ApiError, HttpApi
from topics_actors.cli.output import api_of, fail, json_option, print_json, print_table, verb
from topics_actors.cli.topic_verbs import DURABILITIES

PROGRESS_S = 0.5
READ_LIMIT = 1000
READ_WAIT_MS = 500
PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p999", 0.999))


@dataclasses.dataclass
class Tally:
    """What one role's threads counted; each thread appends to its own lists."""
    records: int = 0
    errors: int = 0
    latencies_ms: list = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def add(self, records: int, latencies_ms: list[float]) -> None:
        with self.lock:
            self.records += records
            self.latencies_ms.extend(latencies_ms)


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summary(tally: Tally, seconds: float) -> dict:
    ordered = sorted(tally.latencies_ms)
    out = {"records": tally.records, "records_per_s": round(tally.records / seconds, 1),
           "errors": tally.errors, "samples": len(ordered)}
    for name, q in PERCENTILES:
        value = percentile(ordered, q)
        out[f"{name}_ms"] = None if value is None else round(value, 3)
    return out


def produce(url, key, topic, batch, pad, stop, tally: Tally) -> None:
    api = HttpApi(url, key)
    path = api.path("v0", "topics", topic)
    try:
        while not stop.is_set():
            sent = time.monotonic_ns()
            records = [{"data": {"t": sent, "p": pad}} for _ in range(batch)]
            try:
                api.request("POST", path, {"records": records})
            except ApiError:
                with tally.lock:
                    tally.errors += 1
                time.sleep(0.05)
                continue
            tally.add(batch, [(time.monotonic_ns() - sent) / 1e6])
    finally:
        api.close()


def consume(url, key, topic, stop, tally: Tally) -> None:
    api = HttpApi(url, key)
    path, cursor = api.path("v0", "topics", topic, "diff"), 0
    try:
        while not stop.is_set():
            try:
                page = api.request("POST", path, {"from_seq": cursor, "limit": READ_LIMIT,
                                                  "wait_ms": READ_WAIT_MS})
            except ApiError:
                with tally.lock:
                    tally.errors += 1
                time.sleep(0.05)
                continue
            now, records = time.monotonic_ns(), page.get("records", [])
            cursor = page.get("next_from_seq", cursor)
            lat = [(now - r["data"]["t"]) / 1e6 for r in records[:1]
                   if isinstance(r.get("data"), dict) and "t" in r["data"]]
            tally.add(len(records), lat)
    finally:
        api.close()


def progress_text(elapsed: float, duration: float, made: Tally, read: Tally) -> str:
    span = max(elapsed, 1e-3)
    return (f"{elapsed:5.1f}/{duration:.0f} s  produced {made.records:,} "
            f"({made.records / span:,.0f}/s)  consumed {read.records:,} "
            f"({read.records / span:,.0f}/s)  errors {made.errors + read.errors}")


def run_threads(settings, topic, args, made: Tally, read: Tally) -> float:
    """Start every thread, draw the progress line until the duration is up or Ctrl-C,
    stop and join them; the seconds measured."""
    from rich.console import Console
    from rich.live import Live
    stop = threading.Event()
    pad = "x" * max(0, args["size"] - 40)    # the data's JSON is about `size` bytes
    threads = [threading.Thread(target=produce, daemon=True, args=(
        settings["url"], settings["key"], topic, args["batch"], pad, stop, made))
        for _ in range(args["producers"])]
    threads += [threading.Thread(target=consume, daemon=True, args=(
        settings["url"], settings["key"], topic, stop, read))
        for _ in range(args["consumers"])]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    console = Console(stderr=True)
    try:
        with Live("", console=console, transient=True, refresh_per_second=4) as live:
            while (elapsed := time.monotonic() - began) < args["duration"]:
                live.update(progress_text(elapsed, args["duration"], made, read))
                time.sleep(PROGRESS_S)
    except KeyboardInterrupt:
        pass
    seconds = time.monotonic() - began
    stop.set()
    for thread in threads:
        thread.join(READ_WAIT_MS / 1000 + 30)
    return seconds


@click.command("bench")
@click.argument("topic", required=False)
@click.option("-p", "--producers", type=click.IntRange(0, 512), default=4, show_default=True)
@click.option("-c", "--consumers", type=click.IntRange(0, 512), default=1, show_default=True)
@click.option("--durability", type=click.Choice(DURABILITIES), default="fsync",
              show_default=True)
@click.option("--size", type=click.IntRange(40, 1 << 20), default=100, show_default=True,
              help="bytes of a record's data")
@click.option("--batch", type=click.IntRange(1, 10_000), default=1, show_default=True,
              help="records per append")
@click.option("-d", "--duration", type=click.FloatRange(0.5, 3600), default=5.0,
              show_default=True, help="seconds")
@click.option("--keep", is_flag=True, help="keep the topic (default: deleted afterwards)")
@json_option
@click.pass_context
@verb
def bench(ctx, topic, keep, as_json, **args) -> int:
    """Measure appends and reads against a node: rate and latency p50/p99/p999."""
    if not args["producers"]:
        return fail("at least one producer is needed", ExitCode.USAGE)
    settings = ctx.find_root().obj
    api = api_of(ctx)
    topic = topic or f"bench-{os.getpid()}-{int(time.time())}"
    api.request("PUT", api.path("v0", "topics", topic), {"durability": args["durability"]})
    made, read = Tally(), Tally()
    try:
        seconds = run_threads(settings, topic, args, made, read)
    finally:
        if not keep:
            api.request("DELETE", api.path("v0", "topics", topic))
    doc = {"topic": topic, "seconds": round(seconds, 3), **args,
           "append": summary(made, seconds), "read": summary(read, seconds)}
    if as_json:
        print_json(doc)
        return ExitCode.OK
    rows = [[role, f"{d['records']:,}", f"{d['records_per_s']:,.0f}", d["p50_ms"],
             d["p99_ms"], d["p999_ms"], d["errors"]]
            for role, d in (("append (ack)", doc["append"]), ("read (append to read)",
                                                              doc["read"]))]
    print_table(["", "records", "records/s", "p50 ms", "p99 ms", "p999 ms", "errors"], rows,
                title=f"{topic}: {args['producers']} producers x {args['batch']} records of "
                      f"{args['size']} B, {args['consumers']} consumers, "
                      f"{args['durability']}, {seconds:.1f} s",
                right=("records", "records/s", "p50 ms", "p99 ms", "p999 ms", "errors"))
    return ExitCode.OK
