"""Entry point of a shard process: `python -m topics_actors.shard --options <JSON>` (spawned
by the supervisor; config.ShardProcessOptions)."""

from __future__ import annotations

import sys

import zmq

from topics_actors import server_keys
from topics_actors.child_process import child_main
from topics_actors.client_keys import client_keys_from_env
from topics_actors.curve_auth import CurveAuth
from topics_actors.config import ShardProcessOptions
from topics_actors.shard.shard_core import ShardCore
from topics_actors.shard.shard_server import ShardServer
from topics_actors.storage.fs import RealFs
from topics_actors.supervisor_link import SupervisorLink, stop_on_signals


def serve(options: ShardProcessOptions, ctx: zmq.Context, link: SupervisorLink | None) -> None:
    ring = client_keys_from_env()      # the supervisor checked it before spawning anyone
    curve = (CurveAuth(ctx, ring, server_keys.load(options.shard.data_dir))
             if ring.enabled else None)
    try:
        server = ShardServer(ShardCore(RealFs(), options.shard), ctx, link, options.host,
                             options.port, options.ipc, curve)
        stop_on_signals(server)
        server.serve()
    finally:
        if curve is not None:
            curve.stop()


def main(argv: list[str] | None = None) -> int:
    return child_main(ShardProcessOptions, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
