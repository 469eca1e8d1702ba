"""The start of every process the supervisor spawns: one argument, a log format, dying with
the parent, a ZeroMQ context and the supervisor link. Each `python -m topics_actors.<role>`
is child_main(<its options type>, <its serve function>).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import zmq

from topics_actors.allocator_policy import settle_allocator
from topics_actors.collector_policy import settle_collector
from topics_actors.config import ProcessOptions, decode_options
from topics_actors.errors import InvariantViolation
from topics_actors.process_profile import profiled
from topics_actors.supervisor_link import SupervisorLink, die_with_parent

log = logging.getLogger(__name__)

EXIT_BUG = 70                    # EX_SOFTWARE; the supervisor restarts the process


def die_of_bug(bug: InvariantViolation) -> NoReturn:
    """End the process at once, for a bug met where a loop would otherwise carry on (the
    gateway's requests and its commit listener): the supervisor restarts it."""
    log.critical("event=invariant_violation pid=%d exit_code=%d", os.getpid(), EXIT_BUG,
                 exc_info=bug)
    logging.shutdown()
    os._exit(EXIT_BUG)


def child_main(kind: type, serve: Callable, argv: list[str] | None = None) -> int:
    """Parse `--options` (config.encode_options of a `kind`), configure logging with the
    process's name, die with the supervisor, settle the garbage collector
    (collector_policy.py) and the C allocator (allocator_policy.py), and run
    serve(options, ctx, link) inside child_context."""
    options = decode_options(kind, _options_text(kind, sys.argv[1:] if argv is None else argv))
    process: ProcessOptions = options.process
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {process.log_name} %(levelname)s %(message)s")
    if process.parent_pid:
        die_with_parent(process.parent_pid)
    settle_collector()
    settle_allocator()
    with child_context(process) as (ctx, link), profiled(process.log_name):
        serve(options, ctx, link)
    return 0


def _options_text(kind: type, argv: list[str]) -> str:
    """The `--options` argument. The supervisor's exact `--options TEXT` is read without
    argparse: building and running a parser in a child forked from the fork server wrote to
    (and so copied) about 1.2 MB of its pages (docs/OPERATIONS.md 17). Anything else, `--help`
    or a mistake, gets argparse's usage and errors."""
    if len(argv) == 2 and argv[0] == "--options":
        return argv[1]
    import argparse      # here: kept out of the image children are forked from, as above
    parser = argparse.ArgumentParser(prog=f"python -m {kind.__module__}",
                                     description="a node process, spawned by the supervisor")
    parser.add_argument("--options", required=True,
                        help=f"the {kind.__name__} as JSON (topics_actors.config)")
    return parser.parse_args(argv).options


@contextlib.contextmanager
def child_context(process: ProcessOptions):
    """A child's ZeroMQ context and supervisor link (None without a control endpoint),
    both closed on the way out. The context is destroyed, not just terminated: a server
    that raised before closing its sockets would otherwise block term() forever, and the
    process would hang instead of dying with its traceback."""
    ctx = zmq.Context(io_threads=1)
    link = (SupervisorLink(ctx, process.control, process.role, process.index,
                           process.parent_pid, process.heartbeat_interval_ms)
            if process.control else None)
    try:
        yield ctx, link
    finally:
        if link:
            link.close()
        ctx.destroy(linger=0)
