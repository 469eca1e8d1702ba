"""A node that cannot listen where it was told to says so in one line and exits 2: no
traceback, and the data directory is free for the next start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from supervisor.data_lock import DataDirLock


def _serve(tmp_path, **env) -> subprocess.CompletedProcess:
    full = dict(os.environ, TOPICS_DATA_DIR=str(tmp_path / "data"), TOPICS_WAL_SHARDS="1",
                **env)
    return subprocess.run([sys.executable, "-m", "supervisor.cli", "serve"], env=full,
                          capture_output=True, text=True, timeout=60, start_new_session=True)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("taken", ["http", "front"])
def test_a_port_in_use_is_one_line_and_exit_2(tmp_path, taken):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = ({"TOPICS_PORT": str(port), "TOPICS_ZMQ_PORT": "0"} if taken == "http"
               else {"TOPICS_PORT": "0", "TOPICS_ZMQ_PORT": str(port)})
        done = _serve(tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    refused = [line for line in done.stderr.splitlines() if "event=start_refused" in line]
    assert len(refused) == 1 and f"127.0.0.1:{port}" in refused[0], done.stderr
    assert "Address already in use" in refused[0]
    lock = DataDirLock(str(tmp_path / "data"))
    lock.acquire(wait_ms=0)
    lock.release()
