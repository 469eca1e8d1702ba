"""What a node process's live Python objects are, from the tracemalloc snapshots it wrote
with TOPICS_TRACEMALLOC_DIR set (topics_actors/process_profile.py).

    python3 tools/bench/heap_snapshots.py DIR [--top 25] [--by lineno|filename|traceback]
        [--process shard-00]

For each process, its newest snapshot: the total traced, and the allocation sites that
hold the most, with how much each grew since the process's first snapshot.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tracemalloc

MIB = 1 << 20
_NAME = re.compile(r"^(?P<process>.+)-(?P<pid>\d+)-(?P<n>\d+)\.snap$")


def snapshots(directory: str) -> dict[str, list[str]]:
    """process name -> its snapshot files, oldest first."""
    found: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for file in os.listdir(directory):
        match = _NAME.match(file)
        if match:
            found[match["process"]].append((int(match["n"]), os.path.join(directory, file)))
    return {name: [path for _n, path in sorted(files)] for name, files in sorted(found.items())}


def report(name: str, paths: list[str], top: int, by: str) -> list[str]:
    first = tracemalloc.Snapshot.load(paths[0])
    last = tracemalloc.Snapshot.load(paths[-1])
    total = sum(stat.size for stat in last.statistics("filename"))
    lines = [f"{name}: {total / MIB:.1f} MiB traced in {len(paths)} snapshots "
             f"(the newest: {os.path.basename(paths[-1])})"]
    for stat in sorted(last.compare_to(first, by), key=lambda stat: -stat.size)[:top]:
        frames = " <- ".join(f"{os.path.relpath(f.filename)}:{f.lineno}"
                             for f in stat.traceback)
        lines.append(f"  {stat.size / MIB:7.2f} MiB ({stat.size_diff / MIB:+6.2f}) "
                     f"{stat.count:>8} blocks  {frames}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--by", choices=("lineno", "filename", "traceback"), default="lineno")
    parser.add_argument("--process", default=None, help="only this process")
    args = parser.parse_args(argv)
    for name, paths in snapshots(args.directory).items():
        if args.process is None or name == args.process:
            print("\n".join(report(name, paths, args.top, args.by)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
