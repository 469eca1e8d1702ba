"""The walk of one HTTP append through the code: every function of topics_actors/ it enters,
from the gateway's request handler to the WAL write and back to the HTTP response.

    python tools/append_walk.py [--root DIR] [--walk]

One process plays both sides: a GatewayCore (the real one, with its EngineLink and the
NodeClient in it) whose connection to the shard (tools/testing/loopback_connection.py, a
stand-in not walked) hands each request's encoded bytes to a ShardCore over a temp data
dir, as the shard's socket shell would (decode, admit, submit, commit), and the reply's
bytes back. sys.setprofile records each call event of a Python
function defined under `topics_actors/` while one single-record append (POST
/v0/topics/t, fsync class, an existing topic) is handled, after a first append made the
route and the topic warm. Comprehensions and generator expressions are not stops; a
generator resumed is (control goes back to it).

Prints: stops (function entries), the files they are in, and the returns to a file already
left (a stop in a file the walk left earlier, not the one it just came from), for the whole
walk and for its part up to the WAL write; with --walk, every stop. `--root` runs the
topics_actors found there (e.g. an older tree from `git archive`), to compare a change's
before and after (docs/ARCHITECTURE.md, issue 31).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import sys
import tempfile

SKIPPED = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")
WAL_WRITE = ("storage/wal_writer.py", "WalWriter.write")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), help="directory holding the topics_actors to walk")
    p.add_argument("--walk", action="store_true", help="print every stop")
    return p.parse_args(argv)


def shard_core(data_dir: str):
    from topics_actors.config import ShardOptions
    from topics_actors.shard.shard_core import ShardCore
    from topics_actors.storage.fs import RealFs
    from topics_actors.storage.wal_layout import prepare_layout
    prepare_layout(RealFs(), data_dir, 1)
    core = ShardCore(RealFs(), ShardOptions(data_dir, 0, 1, wal_file_bytes=64 << 20,
                                            background_prealloc=False))
    for _ in core.replay().run():
        pass
    core.ready = True
    return core


def shard_answer(core):
    """`core` reached the way the shard's shell does: decode, admit, submit, commit."""
    from topics_actors.protocol import decode
    try:
        from topics_actors.shard.request_intake import admitted
    except ImportError:             # a tree from before the intake had a module of its own
        from topics_actors.shard.shard_server import admitted

    def answer(raw: bytes) -> list[bytes]:
        corr, msg = decode(raw)
        core.submit(b"igateway", corr, admitted(msg, True), 0)
        return [reply for _peer, reply in core.commit()]
    return answer


def loopback_class():
    """This checkout's LoopbackConnection, whichever tree `--root` walks."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing",
                        "loopback_connection.py")
    spec = importlib.util.spec_from_file_location("loopback_connection", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LoopbackConnection


def gateway(core):
    from topics_actors.client.shard_map import ShardMap
    from topics_actors.gateway.engine_link import EngineLink
    from topics_actors.gateway.gateway_core import GatewayCore
    from topics_actors.gateway.gateway_settings import GatewaySettings
    link = EngineLink("tcp://127.0.0.1:1")
    client = link.client
    shard_map = ShardMap(1, ("tcp://127.0.0.1:2",), (1,), ("ready",), True,
                         ("ipc:///walk/shard-00.sock",))
    ipc = "ipc:///walk/shard-00.sock"
    try:                  # the node's own processes reach a shard on its lane (issue 37)
        from topics_actors.protocol.lane import lane_path
        endpoint = lane_path(ipc)
    except ImportError:
        endpoint = ipc
    conns = {0: loopback_class()(endpoint, shard_answer(core))}
    if hasattr(client, "_core"):       # the client core (issue 31)
        client._core._reached, client._core.map = True, shard_map
        client._transport._conns = conns
    else:
        client._reached, client._map, client._conns = True, shard_map, conns
    return GatewayCore(GatewaySettings(allow_insecure_no_auth=True), link, 0)


def walk(root: str) -> list[tuple[str, str]]:
    from topics_actors.gateway.http_message import HttpRequest
    from topics_actors.protocol.messages import PutTopic
    package = os.path.join(root, "topics_actors") + os.sep
    data_dir = tempfile.mkdtemp(prefix="topics-append-walk-")
    stops: list[tuple[str, str]] = []

    def profile(frame, event, _arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(package) and code.co_name not in SKIPPED:
                stops.append((code.co_filename[len(package):], code.co_qualname))

    async def run():
        core = shard_core(data_dir)
        core.submit(b"p", 1, PutTopic("t", {"durability": "fsync"}), 0)
        core.commit()
        gw = gateway(core)
        request = HttpRequest("POST", "/v0/topics/t", "", {"content-type": "application/json"},
                              b'{"records":[{"data":{"n":1}}]}')
        await gw.handle(request)               # warm: the route, the topic, the caches
        sys.setprofile(profile)
        try:
            response = await gw.handle(request)
        finally:
            sys.setprofile(None)
        assert response.status == 200, response.body
        core.close()
    try:
        asyncio.run(run())
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return stops


def summary(stops: list[tuple[str, str]]) -> tuple[int, int, int]:
    """(stops, files, returns to a file already left)."""
    seen, returns, previous = set(), 0, None
    for path, _name in stops:
        if path != previous and path in seen:
            returns += 1
        seen.add(path)
        previous = path
    return len(stops), len(seen), returns


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, args.root)
    stops = walk(args.root)
    if args.walk:
        for path, name in stops:
            print(f"  {path}: {name}")
    count, files, returns = summary(stops)
    print(f"topics_actors from {args.root}: one HTTP append, {count} stops in {files} files, "
          f"{returns} returns to a file already left")
    wal = next(i for i, stop in enumerate(stops) if stop == WAL_WRITE) + 1
    count, files, returns = summary(stops[:wal])
    print(f"  to the WAL write: {count} stops in {files} files, {returns} returns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
