"""ZeroMQ client keys without sockets: parsing TOPICS_ZMQ_CLIENT_KEYS, the scope and prefix
check of every request kind (topics_actors/client_keys.py), the server key pair's files
(topics_actors/server_keys.py) and the client's key arguments (client/curve_credentials.py).

Method: real keys from zmq.curve_keypair; each request kind checked against keys that
have, and lack, the scope its HTTP route needs.
"""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from topics_actors import server_keys
from topics_actors.client.curve_credentials import CurveCredentials
from topics_actors.client_keys import KIND_SCOPES, parse_client_keys
from topics_actors.errors import TopicsError
from topics_actors.key_scopes import KeySyntaxError
from topics_actors.protocol.envelope import registered_kinds
from topics_actors.protocol.messages import (
    Ack, Append, Checkpoint, Claim, DeleteRecords, DeleteRouters, DeleteTopic, Diff, GetTopic,
    ListRouters, ListTopics, PutRouter, PutTopic, RouterSync, Scan, Status,
)

pytestmark = pytest.mark.timeout(30)
KEYS = [zmq.curve_keypair()[0].decode() for _ in range(4)]


def ring():
    return parse_client_keys(f"{KEYS[0]}, {KEYS[1]}:read, {KEYS[2]}:w:team.|ops., "
                             f"{KEYS[3]}:rw+d")


def code(public, msg) -> str | None:
    try:
        ring().authorize(public, msg)
    except TopicsError as error:
        return error.code.wire
    return None


def test_parsing_keeps_scopes_and_prefixes():
    keys = ring().keys
    assert keys[KEYS[0]].scopes == {"read", "write", "delete", "admin"}
    assert keys[KEYS[1]].scopes == {"read"}
    assert keys[KEYS[2]].scopes == {"write"} and keys[KEYS[2]].prefixes == (b"team.", b"ops.")
    assert keys[KEYS[3]].scopes == {"read", "write", "delete"}
    assert parse_client_keys("").enabled is False and parse_client_keys(" , ").enabled is False


@pytest.mark.parametrize("text", ["not-a-key", KEYS[0] + "x", f"{KEYS[0]}:fly",
                                  KEYS[0][:39] + "~"])
def test_bad_entries_refuse_the_start(text):
    with pytest.raises(KeySyntaxError) as err:
        parse_client_keys(text)
    assert "TOPICS_ZMQ_CLIENT_KEYS entry 1" in str(err.value)


@pytest.mark.parametrize("msg, needs", [
    (GetTopic("t"), "read"), (Diff("t"), "read"), (Scan("t"), "read"),
    (ListTopics(), "read"), (Append("t", [[b"1"]]), "write"), (Ack("t", "n", [1]), "write"),
    (DeleteTopic("t"), "delete"), (DeleteRecords("t", 5), "delete"),
    (PutTopic("t"), "admin"), (Checkpoint(), "admin"),
])
def test_each_kind_needs_the_scope_of_its_http_route(msg, needs):
    assert code(KEYS[0], msg) is None
    assert code(KEYS[1], msg) == (None if needs == "read" else "forbidden")
    assert code(KEYS[3], msg) == ("forbidden" if needs == "admin" else None)


def test_claim_needs_read_and_write_and_status_needs_nothing():
    assert code(KEYS[3], Claim("t", "n")) is None
    assert code(KEYS[1], Claim("t", "n")) == "forbidden"             # read alone
    assert code(KEYS[2], Claim("team.q", "n")) == "forbidden"        # write alone
    assert code(KEYS[2], Ack("team.q", "n", [1])) is None
    assert code(KEYS[1], Status()) is None


def test_every_client_kind_has_its_scopes_written_down():
    import topics_actors.protocol.control  # noqa: F401  (registers hello and heartbeat)
    internal = {"checkpoint", "absorbed", "retain", "watch_create", "watch_open",
                "watch_cursor", "stream_lease", "hello", "heartbeat", "replica_roles",
                "isr_change", "place_topic", "topic_change"}
    assert set(registered_kinds()) - internal == set(KIND_SCOPES)


def test_an_append_with_config_needs_admin():
    assert code(KEYS[3], Append("t", [[b"1"]], config={"durability": "fsync"})) == "forbidden"
    assert code(KEYS[0], Append("t", [[b"1"]], config={"durability": "fsync"})) is None


def test_prefixes_limit_names_and_listing():
    assert code(KEYS[2], Append("team.a", [[b"1"]])) is None
    assert code(KEYS[2], Append("other", [[b"1"]])) == "forbidden"
    limited = parse_client_keys(f"{KEYS[2]}:r:team.")
    for prefix, expected in (("team.x", None), ("", "forbidden"), ("tea", "forbidden")):
        try:
            limited.authorize(KEYS[2], ListTopics(prefix=prefix))
            got = None
        except TopicsError as error:
            got = error.code.wire
        assert got == expected, prefix


def test_an_unlisted_or_missing_identity_is_unauthorized():
    stranger = zmq.curve_keypair()[0].decode()
    assert code(stranger, GetTopic("t")) == "unauthorized"
    assert code(None, GetTopic("t")) == "unauthorized"


def test_the_server_key_pair_is_created_once_with_a_private_secret(tmp_path):
    data_dir = str(tmp_path)
    first = server_keys.load_or_create(data_dir)
    secret_path = os.path.join(data_dir, "curve", "server.secret")
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    assert server_keys.load_or_create(data_dir) == first
    assert server_keys.load(data_dir) == first
    assert first.secret.decode() not in repr(first)
    assert zmq.curve_public(first.secret) == first.public


def test_client_credentials_take_a_key_or_a_file(tmp_path):
    public, secret = zmq.curve_keypair()
    server = server_keys.load_or_create(str(tmp_path))
    path = os.path.join(str(tmp_path), "curve", "server.public")
    from_file = CurveCredentials.of(path, public, secret)
    assert from_file == CurveCredentials.of(server.public.decode(), public.decode(), secret)
    assert CurveCredentials.of(None, None, None) is None
    with pytest.raises(TopicsError):
        CurveCredentials.of(path, public, None)
    with pytest.raises(TopicsError):
        CurveCredentials.of("short", public, secret)
    assert secret.decode() not in repr(from_file)


def test_router_requests_keep_every_name_within_the_prefixes():
    admin = zmq.curve_keypair()[0].decode()
    limited = parse_client_keys(f"{admin}:admin+read+delete:team.")

    def refused(msg):
        try:
            limited.authorize(admin, msg)
        except TopicsError as error:
            return error.code.wire
        return None
    assert refused(PutRouter("team.d", "team.r", "team.s")) is None
    assert refused(PutRouter("team.d", "team.r", "other.s")) == "forbidden"   # the source
    assert refused(PutRouter("team.d", "other.r", "team.s")) == "forbidden"   # the name
    assert refused(DeleteRouters(router="other.r")) == "forbidden"
    assert refused(ListRouters()) == "forbidden"        # cannot be filtered to the prefixes
    assert refused(RouterSync("team.d", "team.r", 5)) is None
