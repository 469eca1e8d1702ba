"""Fixtures of the unit suite: a FaultFs, a data dir, shard harnesses over it
(tools/testing/shard_harness.py), and a count of the JSON parses staging makes."""

from __future__ import annotations

import os

import orjson
import pytest

from tools.testing.fault_fs import FaultFs
from tools.testing.shard_harness import ShardEnv


@pytest.fixture
def ffs() -> FaultFs:
    return FaultFs()


@pytest.fixture
def data_dir(tmp_path) -> str:
    path = os.path.join(str(tmp_path), "data")
    os.makedirs(path)
    return path


@pytest.fixture
def env(data_dir, ffs) -> ShardEnv:
    return ShardEnv(data_dir, ffs)


@pytest.fixture
def shard(env):
    """A started single-shard harness over a fresh data dir (closed or crashed by the test)."""
    harness = env.single()
    yield harness
    if harness.core is not None:
        harness.crash()


@pytest.fixture
def loads_calls(monkeypatch) -> list:
    """Every data orjson.loads parses while the test runs (staging's parse count)."""
    calls, real = [], orjson.loads

    def counting(raw):
        calls.append(bytes(raw))
        return real(raw)
    monkeypatch.setattr(orjson, "loads", counting)
    return calls
