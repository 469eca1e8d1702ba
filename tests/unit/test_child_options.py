"""Configuration as data: each kind of child's options, built from NodeConfig, survive the
one `--options` argument unchanged and carry the node's values; no secret reaches a command
line; the front port follows the HTTP port unless TOPICS_ZMQ_PORT is set; and a real shard
process runs from nothing but its options (unsupervised), logging under its name."""

import argparse
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from tests.support import wait_for
from topics_actors import child_process, config
from topics_actors.config import NodeConfig, NodeWiring
from topics_actors.storage.fs import RealFs
from topics_actors.storage.wal_layout import prepare_layout

pytestmark = pytest.mark.timeout(30)
WIRING = NodeWiring("ipc:///run/control.sock", "tcp://127.0.0.1:4001", 4001, "/run", 77, 1234)


def all_options(cfg: NodeConfig) -> list:
    return [config.shard_process_options(cfg, WIRING, 1, 5555),
            config.compactor_options(cfg, WIRING), config.reclaimer_options(cfg, WIRING),
            config.gateway_options(cfg, WIRING, 2, 9)]


def test_every_kind_of_options_round_trips_through_its_argument():
    cfg = NodeConfig(data_dir="/data", cold_dir="/cold", max_total_bytes=1 << 30,
                     wal_shards=3, segment_max_age_ms=0)
    for options in all_options(cfg):
        text = config.encode_options(options)
        assert config.decode_options(type(options), text) == options
        assert "\n" not in text


def test_options_carry_the_node_config():
    cfg = NodeConfig.from_env({"TOPICS_DATA_DIR": "/d", "TOPICS_WAL_SHARDS": "3",
                               "TOPICS_WAL_FILE_BYTES": str(2 << 20),
                               "TOPICS_DISK_FLUSH_INTERVAL_MS": "7",
                               "TOPICS_HEARTBEAT_INTERVAL_MS": "250",
                               "TOPICS_MAX_TOTAL_BYTES": "100",
                               "TOPICS_SEGMENT_MAX_EVENTS": "9",
                               "TOPICS_HOT_RETAIN_SEGMENTS": "2"})
    shard, compactor, reclaimer, gateway = all_options(cfg)
    assert shard.shard == config.ShardOptions(
        "/d", 1, 3, 2 << 20, 7, quota_file="/run/live-bytes", max_total_bytes=100)
    assert (shard.port, shard.ipc) == (5555, "/run/shard-01.sock")
    assert shard.process == config.ProcessOptions("shard", 1, 250, WIRING.control, 77)
    assert (compactor.segment_max_events, compactor.wal_file_bytes) == (9, 2 << 20)
    assert reclaimer.hot_retain_segments == 2 and reclaimer.front == WIRING.front
    assert (gateway.listen_fd, gateway.zmq_port, gateway.node_started_ms) == (9, 4001, 1234)
    assert [o.process.log_name for o in (shard, compactor, reclaimer, gateway)] == [
        "shard-01", "compactor", "reclaimer", "gateway-02"]


def test_the_defaults_are_written_once():
    options = config.ShardOptions("/d", 0, 1)
    cfg = NodeConfig()
    assert (options.wal_file_bytes, options.disk_flush_interval_ms) == (
        cfg.wal_file_bytes, cfg.disk_flush_interval_ms)
    assert config.shard_process_options(cfg, WIRING, 0, 0).shard.quota_file is None


def test_no_secret_reaches_a_command_line():
    cfg = NodeConfig.from_env({"TOPICS_API_KEYS": "s3cr3t-key:rw"})
    assert not any("s3cr3t" in config.encode_options(o) for o in all_options(cfg))


@pytest.mark.parametrize("env,front", [
    ({}, 4001), ({"TOPICS_PORT": "8000"}, 8001), ({"TOPICS_PORT": "0"}, 0),
    ({"TOPICS_PORT": "8000", "TOPICS_ZMQ_PORT": "9000"}, 9000),
    ({"TOPICS_PORT": "8000", "TOPICS_ZMQ_PORT": "0"}, 0),
    ({"TOPICS_PORT": "8000", "TOPICS_ZMQ_PORT": ""}, 8001),
])
def test_the_front_port_follows_the_http_port(env, front):
    cfg = NodeConfig.from_env(env)
    cfg.validate()
    assert cfg.front_port() == front


def test_the_last_http_port_needs_an_explicit_front_port():
    with pytest.raises(SystemExit, match="TOPICS_ZMQ_PORT"):
        NodeConfig.from_env({"TOPICS_PORT": "65535"}).validate()
    NodeConfig.from_env({"TOPICS_PORT": "65535", "TOPICS_ZMQ_PORT": "4001"}).validate()


def test_a_shard_process_runs_from_its_options_alone(tmp_path):
    data_dir = str(tmp_path / "data")
    os.makedirs(data_dir)
    prepare_layout(RealFs(), data_dir, 1)
    options = config.ShardProcessOptions(
        config.ProcessOptions("shard", 0, 500), config.ShardOptions(data_dir, 0, 1, 1 << 20),
        "127.0.0.1", 0, None)
    log_path = tmp_path / "shard.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "topics_actors.shard", "--options",
                                 config.encode_options(options)], stdout=log, stderr=log)
    try:
        wait_for(lambda: b"event=ready shard=0" in log_path.read_bytes()
                 or proc.poll() is not None, 20, "the shard to be ready")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert b" shard-00 INFO event=ready shard=0" in log_path.read_bytes()


def test_the_supervisors_argument_is_read_without_argparse(monkeypatch):
    """`--options TEXT` exactly as the supervisor passes it is read without a parser (made in
    a forked child, one copied 1.2 MB of shared pages); anything else goes through argparse
    (and a command line without options is refused: the test below)."""
    made = []
    parse_args = argparse.ArgumentParser.parse_args

    def counting(parser, *args, **kwargs):
        made.append(args)
        return parse_args(parser, *args, **kwargs)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", counting)
    kind = config.ReclaimerOptions
    assert child_process._options_text(kind, ["--options", '{"a": 1}']) == '{"a": 1}'
    assert not made
    assert child_process._options_text(kind, ["--options={}"]) == "{}" and len(made) == 1


def test_a_child_refuses_a_command_line_without_options():
    done = subprocess.run([sys.executable, "-m", "topics_actors.reclaimer"],
                          capture_output=True, timeout=20)
    assert done.returncode == 2 and b"--options" in done.stderr


def run_python(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, from the repository's root."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=15, cwd=pathlib.Path(__file__).resolve().parents[2])


@pytest.mark.timeout(20)
def test_a_server_that_raises_with_sockets_open_ends_its_process():
    """A bug while sockets are open must end the process with its traceback, not hang in
    the context's teardown (the shard once hung there, silent, until its heartbeat
    deadline)."""
    code = ("import zmq\n"
            "from topics_actors.child_process import child_context\n"
            "from topics_actors.config import ProcessOptions\n"
            "with child_context(ProcessOptions('shard', 0, 500)) as (ctx, link):\n"
            "    sock = ctx.socket(zmq.ROUTER)\n    sock.bind('tcp://127.0.0.1:0')\n"
            "    raise RuntimeError('a bug')\n")
    done = run_python(code)
    assert done.returncode == 1 and "RuntimeError: a bug" in done.stderr


def test_a_settled_collector_freezes_startup_objects_and_spaces_its_passes():
    """Run in a fresh interpreter: the settings are process-wide."""
    code = ("import gc\n"
            "from topics_actors.collector_policy import settle_collector, YOUNG_THRESHOLD\n"
            "assert gc.get_freeze_count() == 0 and gc.get_threshold()[0] < YOUNG_THRESHOLD\n"
            "settle_collector()\n"
            "print(gc.get_freeze_count() > 1000, gc.get_threshold()[0] == YOUNG_THRESHOLD,\n"
            "      gc.isenabled())\n")
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]
