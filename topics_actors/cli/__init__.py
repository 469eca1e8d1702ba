"""The `topics` command's verbs over the /v0 HTTP API (docs/OPERATIONS.md, "The topics
command"); supervisor/cli.py is the entry point that adds them beside `serve` and `fsck`.

Modules: http_api (the blocking HTTP client and ApiError), exit_code (the exit codes),
output (JSON, tables and errors; the `verb` wrapper), record_input (records from arguments
or stdin), event_stream (server-sent events from a byte stream), topic_verbs (ls, info, rm,
append, tail), work_verbs (queue, routers), node_verbs (cluster, checksum, quarantine),
move_verbs (cluster move and drain),
bench_verb (bench).
"""

from __future__ import annotations


VERB_NAMES = ("ls", "info", "rm", "append", "tail", "queue", "routers", "cluster",
              "checksum", "quarantine", "bench")


def add_verbs(group) -> None:
    """Every verb, added to the click group `group`."""
    from topics_actors.cli import bench_verb, node_verbs, topic_verbs, work_verbs
    for command in (topic_verbs.ls, topic_verbs.info, topic_verbs.rm, topic_verbs.append,
                    topic_verbs.tail, work_verbs.queue, work_verbs.routers,
                    node_verbs.cluster, node_verbs.checksum, node_verbs.quarantine,
                    bench_verb.bench):
        group.add_command(command)
