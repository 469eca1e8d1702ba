"""CURVE on the client endpoints (TOPICS_ZMQ_CLIENT_KEYS) against a real node.

Method: a node started with three client keys (full, read-only, prefix-limited); clients
with each key, with an unknown key and with none, routing (shards' TCP sockets) and
forwarding (the front); the key pair in the data dir across a restart; a public bind with
neither keys nor the opt-out. Secrets must not appear in the node's log.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import zmq

from topics_actors.client import Client, TopicsError

pytestmark = pytest.mark.timeout(120)
LONG_MS = 600_000      # a wait no test here may sit out

FULL, READER, PREFIXED, STRANGER = (zmq.curve_keypair() for _ in range(4))


def keys_env() -> dict:
    return {"TOPICS_ZMQ_CLIENT_KEYS": f"{FULL[0].decode()}, {READER[0].decode()}:read, "
                                      f"{PREFIXED[0].decode()}::team-a.|team-b.",
            "TOPICS_WAL_FILE_BYTES": str(1 << 20)}      # small files: tests share a disk


def creds(data_dir: str, pair) -> dict:
    return {"curve_server_key": os.path.join(data_dir, "curve", "server.public"),
            "curve_public_key": pair[0], "curve_secret_key": pair[1]}


@pytest.fixture
def secured(make_node, tmp_path):
    data_dir = str(tmp_path / "secure")
    return make_node(shards=2, data_dir=data_dir, env=keys_env(),
                     client_options=creds(data_dir, FULL))


def client(node, pair, **options) -> Client:
    return node.client(**{**creds(node.data_dir, pair), **options})


@pytest.mark.parametrize("route", [True, False])
def test_a_listed_key_works_routed_and_forwarded(secured, route):
    c = client(secured, FULL, route=route)
    assert c.append(f"ok-{route}", [{"data": 1}])["seqs"] == [1]
    assert c.diff(f"ok-{route}")["records"][0]["data"] == 1


@pytest.mark.parametrize("pair", [STRANGER, None])
def test_an_unknown_key_or_none_is_refused_at_once(secured, pair):
    # Timeouts far beyond the test's: `unauthorized` can then only come from the failed
    # handshake itself (a timeout would be `not_ready`, "no node at ...").
    options = creds(secured.data_dir, pair) if pair else {}
    with pytest.raises(TopicsError) as err, \
            Client(secured.endpoint, request_timeout_ms=LONG_MS, connect_timeout_ms=LONG_MS,
                   **options) as stranger:
        stranger.status()
    assert err.value.code.wire == "unauthorized", err.value
    assert secured.endpoint in err.value.message


@pytest.mark.parametrize("route", [True, False])
def test_a_read_only_key_cannot_write(secured, route):
    client(secured, FULL).append("shared", [{"data": 1}])
    reader = client(secured, READER, route=route)
    assert reader.diff("shared")["records"][0]["data"] == 1
    for attempt in (lambda: reader.append("shared", [{"data": 2}]),
                    lambda: reader.delete_topic("shared"), lambda: reader.put_topic("x")):
        with pytest.raises(TopicsError) as err:
            attempt()
        assert err.value.code.wire == "forbidden"
    assert client(secured, FULL).get_topic("shared")["head_seq"] == 1


@pytest.mark.parametrize("route", [True, False])
def test_a_prefix_limited_key_stays_in_its_prefixes(secured, route):
    team = client(secured, PREFIXED, route=route)
    assert team.append("team-a.x", [{"data": 1}])["seqs"] == [1]
    with pytest.raises(TopicsError) as err:
        team.append("team-c.x", [{"data": 1}])
    assert err.value.code.wire == "forbidden" and err.value.detail == {"topic": "team-c.x"}
    assert [t["topic"] for t in team.list_topics(prefix="team-a.")["topics"]] == ["team-a.x"]
    with pytest.raises(TopicsError):
        team.list_topics()


def test_the_key_pair_is_kept_across_restarts_and_secrets_stay_out_of_logs(secured):
    folder = os.path.join(secured.data_dir, "curve")
    secret_path = os.path.join(folder, "server.secret")
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    with open(os.path.join(folder, "server.public"), "rb") as handle:
        public = handle.read()
    with open(secret_path, "rb") as handle:
        secret = handle.read().strip()
    client(secured, FULL).append("kept", [{"data": 1}])
    secured.stop()
    secured.start()
    with open(os.path.join(folder, "server.public"), "rb") as handle:
        assert handle.read() == public
    assert client(secured, FULL).diff("kept")["records"][0]["data"] == 1
    log = secured.log()
    assert secret.decode() not in log and FULL[1].decode() not in log


def test_a_public_bind_without_client_keys_is_refused(tmp_path):
    env = dict(os.environ, TOPICS_DATA_DIR=str(tmp_path / "d"), TOPICS_HOST="0.0.0.0",
               TOPICS_PORT="0", TOPICS_ZMQ_PORT="0", TOPICS_API_KEYS="http-key",
               TOPICS_WAL_SHARDS="1")
    env.pop("TOPICS_ALLOW_INSECURE_NO_AUTH", None)
    env.pop("TOPICS_ZMQ_CLIENT_KEYS", None)
    done = subprocess.run([sys.executable, "-m", "supervisor.cli", "serve"], env=env,
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    assert done.returncode == 2, done.stderr
    refused = [line for line in done.stderr.splitlines() if "event=start_refused" in line]
    assert len(refused) == 1 and "TOPICS_ZMQ_CLIENT_KEYS" in refused[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_async_client_with_keys(secured):
    import asyncio
    from topics_actors.client import AsyncClient

    async def run():
        options = creds(secured.data_dir, READER)
        async with AsyncClient(secured.endpoint, request_timeout_ms=2_000, **options) as c:
            assert (await c.status())["node_ready"] is True
            with pytest.raises(TopicsError) as err:
                await c.append("async-w", [{"data": 1}])
            assert err.value.code.wire == "forbidden"
        async with AsyncClient(secured.endpoint, request_timeout_ms=LONG_MS,
                               connect_timeout_ms=LONG_MS) as c:
            with pytest.raises(TopicsError) as err:
                await c.status()
            assert err.value.code.wire == "unauthorized"
    asyncio.run(run())
