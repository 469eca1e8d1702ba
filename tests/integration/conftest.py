"""Fixtures of the in-process shard shell tests."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
import zmq

from topics_actors.shard.shard_server import ShardServer
from topics_actors.storage.fs import RealFs
from topics_actors.storage.wal_layout import prepare_layout
from tools.testing.shard_harness import ShardHarness


@pytest.fixture
def shard_shells(tmp_path):
    """make(shard, count): a ShardServer in this process around a ShardHarness core on the
    real file system, turned by hand; the shells of one test share a run dir (their ipc
    sockets and lanes) and a data dir. make.stop(shell): close one (a restart is a new
    make of the same shard)."""
    run_dir = tempfile.mkdtemp(prefix="ta-")          # AF_UNIX paths are short
    data_dir = str(tmp_path / "data")
    os.makedirs(data_dir)
    fs = RealFs()
    ctx = zmq.Context()
    made = []

    def make(shard: int = 0, count: int = 1) -> ShardServer:
        if not made:
            prepare_layout(fs, data_dir, count)
        harness = ShardHarness(data_dir, fs, shard, count).start()
        shell = ShardServer(harness.core, ctx, None,
                            ipc_path=os.path.join(run_dir, f"shard-{shard:02d}.sock"))
        made.append((shell, harness))
        return shell

    def stop(shell: ShardServer) -> None:
        for item in [m for m in made if m[0] is shell]:
            made.remove(item)
            shell._close()
            item[1].close()
    make.stop = stop
    yield make
    for shell, harness in made:
        shell._close()
        harness.close()
    ctx.term()
    shutil.rmtree(run_dir)
