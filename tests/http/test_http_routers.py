"""Black-box tests of routers (spec/api.md 6) through a real node's HTTP port: CRUD and
its errors, forwarding (same shard and across shards), filters, hops, exactly-once meta,
cascades on topic delete, the router cap and restart survival."""

import asyncio
from urllib.parse import quote

import pytest

from tests.http.test_http_topics import append, error_of
from tools.testing.node_harness import wait_for
from topics_actors.client.async_client import AsyncClient
from topics_actors.errors import TopicsError
from topics_actors.topic_identity import shard_of_name

NODE_SHARDS = 2
NODE_ENV = {"TOPICS_MAX_ROUTERS": "6"}
pytestmark = pytest.mark.timeout(120)


def put_router(node, name, source, dest, **extra):
    return node.http("PUT", f"/v0/routers/{quote(name)}",
                     {"source": source, "dest": dest, **extra})


def records_of(node, topic, from_seq=0):
    reply = node.http("POST", f"/v0/topics/{topic}/diff",
                      {"from_seq": from_seq, "include_tags": True})
    assert reply.status == 200, reply.body
    return reply.json()["records"]


def wait_records(node, topic, count):
    return wait_for(lambda: (lambda r: r if len(r) >= count else None)(records_of(node, topic)),
                    20, f"{count} records in {topic}")


def pair(same_shard: bool, stem: str) -> tuple[str, str]:
    """A source and a dest name in the same shard (or in different shards)."""
    source = f"{stem}-src"
    for n in range(1000):
        dest = f"{stem}-dst{n}"
        if (shard_of_name(dest, NODE_SHARDS) == shard_of_name(source, NODE_SHARDS)) \
                == same_shard:
            return source, dest
    raise AssertionError("no such name")


def delete_all_routers(node):
    for item in node.http("GET", "/v0/routers?page_size=1000").json()["routers"]:
        node.http("DELETE", f"/v0/routers/{quote(item['router'])}")


# --- CRUD and validation ---------------------------------------------------------------------

def test_put_get_list_delete(node):
    created = put_router(node, "a->b", "crud-a", "crud-b")
    assert created.status == 201, created.body
    body = created.json()
    assert {k: body[k] for k in ("router", "created", "source", "dest", "preserve_node",
                                 "preserve_tag", "filter", "allow_cycle", "guarantee")} == {
        "router": "a->b", "created": True, "source": "crud-a", "dest": "crud-b",
        "preserve_node": True, "preserve_tag": True, "filter": None, "allow_cycle": False,
        "guarantee": "at_least_once"}
    assert node.http("GET", "/v0/topics/crud-a").status == 200     # auto-created
    again = put_router(node, "a->b", "crud-a", "crud-b", filter="x*", preserve_tag=False)
    assert again.status == 200 and again.json()["created"] is False
    assert again.json()["filter"] == ["tag", "Glob", "x*"]
    got = node.http("GET", "/v0/routers/a-%3Eb")
    assert got.status == 200 and got.json()["preserve_tag"] is False
    assert got.json()["forwarded_total"] == 0
    listed = node.http("GET", "/v0/routers?source=crud-a").json()["routers"]
    assert listed == [{"router": "a->b", "source": "crud-a", "dest": "crud-b",
                       "guarantee": "at_least_once", "forwarded_total": 0}]
    assert node.http("GET", "/v0/routers?dest=nope").json()["routers"] == []
    gone = node.http("DELETE", "/v0/routers/a-%3Eb")
    assert gone.status == 200 and gone.json()["deleted"] is True
    assert node.http("DELETE", "/v0/routers/a-%3Eb").json()["deleted"] is False
    error_of(node.http("GET", "/v0/routers/a-%3Eb"), 404, "router_not_found")


def test_put_errors_in_contract_order(node):
    error_of(node.http("PUT", "/v0/routers/r", {"dest": "x"}), 400, "invalid_request")
    error_of(put_router(node, "bad name", "e-a", "e-b"), 400, "invalid_request")
    error_of(put_router(node, "r", "e-a", "e-a"), 400, "invalid_request")
    error_of(put_router(node, "r", "e-a", "bad name"), 400, "invalid_request")
    error_of(put_router(node, "r", "e-a", "e-missing", create_dest=False), 404,
             "topic_not_found")
    assert node.http("GET", "/v0/topics/e-a").status == 404      # nothing created
    assert put_router(node, "r1", "e-a", "e-b").status == 201
    fan_in = error_of(put_router(node, "r2", "e-c", "e-b"), 409, "topic_exists_incompatible")
    assert fan_in["detail"] == {"topic": "e-b", "reason": "router_dest_fan_in"}
    assert node.http("GET", "/v0/topics/e-c").status == 404      # its source went again
    repoint = error_of(put_router(node, "r1", "e-a", "e-z"), 409, "topic_exists_incompatible")
    assert repoint["detail"] == {"router": "r1", "reason": "router_repoint_forbidden",
                                 "existing_source": "e-a", "existing_dest": "e-b"}
    delete_all_routers(node)


def test_cycle_is_refused_with_its_path(node):
    assert put_router(node, "ca", "cy-a", "cy-b").status == 201
    assert put_router(node, "cb", "cy-b", "cy-c").status == 201
    cycle = error_of(put_router(node, "cc", "cy-c", "cy-a"), 409, "router_cycle")
    assert cycle["detail"] == {"cycle": ["cy-c", "cy-a", "cy-b", "cy-c"]}
    assert put_router(node, "cc", "cy-c", "cy-a", allow_cycle=True).status == 201
    delete_all_routers(node)


def test_router_cap(node):
    for n in range(6):
        assert put_router(node, f"cap{n}", f"cap-s{n}", f"cap-d{n}").status == 201
    assert put_router(node, "cap0", "cap-s0", "cap-d0").status == 200   # updates don't count
    over = error_of(put_router(node, "cap6", "cap-s6", "cap-d6"), 429, "throttled")
    assert over["detail"] == {"limit": "max_routers", "max": 6}
    assert node.http("GET", "/v0/topics/cap-s6").status == 404   # refused before creating
    delete_all_routers(node)


# --- forwarding -----------------------------------------------------------------------------

@pytest.mark.parametrize("same_shard", [True, False])
def test_forwarding_keeps_order_node_and_no_backfill(node, same_shard):
    source, dest = pair(same_shard, f"fw{int(same_shard)}")
    append(node, source, {"data": "before"})
    assert put_router(node, f"fw{int(same_shard)}", source, dest).status == 201
    for n in range(30):
        assert append(node, source, {"data": n, "tag": f"t{n}", "node": "n1",
                                     "meta": {"k": n}}).status in (200, 201)
    copied = wait_records(node, dest, 30)
    assert [r["data"] for r in copied] == list(range(30))        # no backfill, FIFO
    assert [r["$seq"] for r in copied] == list(range(1, 31))
    assert all(r["$node"] == "n1" and r["$tag"] == f"t{r['data']}"
               and r["meta"] == {"k": r["data"]} for r in copied)
    wait_for(lambda: node.http("GET", f"/v0/routers/fw{int(same_shard)}")
             .json()["forwarded_total"] == 30, 10, "forwarded_total")
    delete_all_routers(node)


def test_filter_preserve_and_exactly_once_meta(node):
    source, dest = pair(False, "eo")
    assert put_router(node, "eo", source, dest, filter=["tag", "Eq", "keep"],
                      preserve_node=False, preserve_tag=False,
                      guarantee="exactly_once").status == 201
    append(node, source, {"data": 1, "tag": "drop"}, {"data": 2}, {"data": 3, "tag": "keep",
                                                                    "node": "n", "meta": 5})
    copied = wait_records(node, dest, 1)
    assert len(copied) == 1
    record = copied[0]
    assert record["data"] == 3 and "$node" not in record and "$tag" not in record
    origin = record["meta"]["_topics_router"]
    assert record["meta"]["_topics_original_meta"] == 5
    assert origin["router"] == "eo" and origin["source_topic"] == source
    assert origin["source_seq"] == 3
    assert origin["idempotency_key"] == (f"router:eo:{origin['source_topic_id']}:"
                                         f"{origin['source_epoch']}:3")
    delete_all_routers(node)


def test_hop_cap_ends_an_allowed_loop(node):
    assert put_router(node, "hx", "hop-x", "hop-y").status == 201
    assert put_router(node, "hy", "hop-y", "hop-x", allow_cycle=True).status == 201
    append(node, "hop-x", {"data": "ping"})
    # x(0) -> y(1) -> x(2) ... a copy is made while hops < 8: 8 copies, 4 in each topic + 1
    wait_for(lambda: len(records_of(node, "hop-x")) == 5 and
             len(records_of(node, "hop-y")) == 4, 20, "the loop to end")
    totals = [node.http("GET", f"/v0/routers/{r}").json()["forwarded_total"]
              for r in ("hx", "hy")]
    assert totals == [4, 4]
    delete_all_routers(node)


def test_deleting_a_topic_removes_its_routers(node):
    assert put_router(node, "del1", "dc-a", "dc-b").status == 201
    assert put_router(node, "del2", "dc-b", "dc-c").status == 201
    gone = node.http("DELETE", "/v0/topics/dc-b").json()
    assert gone["deleted"] is True and gone["routers_removed"] == ["del1", "del2"]
    assert node.http("GET", "/v0/routers?prefix=del").json()["routers"] == []


def test_full_reject_dest_pauses_and_resumes(node):
    source, dest = pair(False, "full")
    node.http("PUT", f"/v0/topics/{dest}", {"cap_records": 2, "discard": "reject"})
    assert put_router(node, "full", source, dest).status == 201
    append(node, source, {"data": 1}, {"data": 2}, {"data": 3})
    wait_records(node, dest, 2)
    node.http("POST", f"/v0/topics/{dest}/delete", {"before_seq": 3})
    copied = wait_records(node, dest, 1)
    assert [r["data"] for r in wait_for(lambda: (lambda r: r if r and r[-1]["data"] == 3
                                                 else None)(records_of(node, dest)),
                                        20, "the third copy")][-1:] == [3]
    assert copied
    delete_all_routers(node)


def test_metrics_count_routers_and_copies(node):
    source, dest = pair(False, "met")
    assert put_router(node, "met", source, dest).status == 201
    append(node, source, {"data": 1}, {"data": 2})
    wait_records(node, dest, 2)

    def figures():
        body = node.http("GET", "/v0/metrics", headers={"accept": "application/json"}).json()
        return body if body["routers_forwarded"] >= 2 else None
    body = wait_for(figures, 20, "the forwarded figure")
    assert body["routers"] == 1 and body["routers_forwarded"] == 2
    text = node.http("GET", "/v0/metrics").body.decode()
    assert "\ntopics_routers 1\n" in text and "\ntopics_router_forwarded_total 2\n" in text
    delete_all_routers(node)


def test_client_library_manages_routers(node):
    client = node.client()
    created = client.put_router("lib", "lib-a", "lib-b", preserve_node=False)
    assert created["created"] is True and created["preserve_node"] is False
    assert client.get_router("lib")["source"] == "lib-a"
    assert [r["router"] for r in client.list_routers(prefix="lib")["routers"]] == ["lib"]
    client.append("lib-a", [{"data": "x", "node": "n"}])
    wait_for(lambda: client.diff("lib-b")["records"], 20, "the copy")
    assert "$node" not in client.diff("lib-b")["records"][0]
    with pytest.raises(TopicsError) as caught:
        client.put_router("lib2", "lib-b", "lib-a")
    assert caught.value.code.wire == "router_cycle"
    assert client.delete_router("lib") == {"router": "lib", "deleted": True}
    with pytest.raises(TopicsError) as caught:
        client.get_router("lib")
    assert caught.value.code.wire == "router_not_found"


def test_async_client_manages_routers(node):
    async def scenario():
        async with AsyncClient(node.endpoint, request_timeout_ms=2000) as client:
            created = await client.put_router("alib", "alib-a", "alib-b")
            got = await client.get_router("alib")
            listed = await client.list_routers(dest="alib-b")
            gone = await client.delete_topic("alib-a")
            left = await client.list_routers(prefix="alib")
            return created, got, listed, gone, left
    created, got, listed, gone, left = asyncio.run(scenario())
    assert created["created"] and got["dest"] == "alib-b"
    assert [r["router"] for r in listed["routers"]] == ["alib"]
    assert gone["routers_removed"] == ["alib"] and left["routers"] == []


@pytest.mark.parametrize("same_shard", [True, False])
def test_reads_of_the_dest_see_acked_source_records(node, same_shard):
    source, dest = pair(same_shard, f"ryw{int(same_shard)}")
    name = f"ryw{int(same_shard)}"
    assert put_router(node, name, source, dest).status == 201
    for n in range(1, 21):     # no waiting: each read follows the acked append at once
        assert append(node, source, {"data": n}).status in (200, 201)
        assert [r["data"] for r in records_of(node, dest)][-1:] == [n]
        assert node.http("GET", f"/v0/topics/{dest}").json()["head_seq"] == n
    assert node.http("GET", f"/v0/routers/{name}").json()["forwarded_total"] == 20
    delete_all_routers(node)


def test_source_records_evicted_before_copying_leave_a_source_trim_tombstone(node):
    source, dest = pair(False, "trim")
    node.http("PUT", f"/v0/topics/{source}", {"cap_records": 3})
    node.http("PUT", f"/v0/topics/{dest}", {"cap_bytes": 1, "discard": "reject"})
    assert put_router(node, "trim", source, dest).status == 201
    append(node, source, {"data": 1})
    wait_records(node, dest, 1)                        # the dest is full now
    append(node, source, *({"data": n} for n in range(2, 7)))   # 2 and 3 are evicted
    wait_for(lambda: node.http("GET", "/v0/routers/trim").json()["cursor"] == 3, 20,
             "the router past the evicted records")
    node.http("PUT", f"/v0/topics/{dest}", {})         # room again
    wait_for(lambda: node.http("GET", "/v0/routers/trim").json()["forwarded_total"] == 4, 20,
             "the other copies")
    first = node.http("POST", f"/v0/topics/{dest}/diff", {"from_seq": 0}).json()
    assert [r["data"] for r in first["records"]] == [1] and first["next_from_seq"] == 1
    second = node.http("POST", f"/v0/topics/{dest}/diff", {"from_seq": 1}).json()
    assert second["tombstone"] == {"gap_from": 2, "gap_to": 3, "reason": "source_trim",
                                   "missed_estimate": 2, "earliest_seq": 1, "head_seq": 6}
    assert [(r["$seq"], r["data"]) for r in second["records"]] == [(4, 4), (5, 5), (6, 6)]
    delete_all_routers(node)
