"""The router endpoints of the gateway (spec/api.md 6): PUT, GET and DELETE
/v0/routers/:r and GET /v0/routers.

The rules live in client/router_admin.py (the ZeroMQ clients use the same); here is only
what is HTTP's: the body, and the key's prefix allowlist on the router's source and dest
(403 before any existence check; a list shows only routers whose name, source and dest the
key may use).
"""

from __future__ import annotations

from topics_actors.client import router_admin
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey, check_name
from topics_actors.gateway.http_message import HttpRequest
from topics_actors.ledger.router_state import parse_definition


def _allowed(key: ApiKey | None, router: dict) -> bool:
    return key is None or all(key.allows_name(router[f])
                              for f in ("router", "source", "dest"))


async def put(engine, key: ApiKey | None, name: str, request: HttpRequest,
              routers_max: int) -> dict:
    body = rb.json_object(request, empty_ok=False)
    definition = parse_definition(name, body)          # 400: missing source or dest
    check_name(key, definition.source)
    check_name(key, definition.dest)
    return await engine.client.drive(router_admin.put_router(name, body, routers_max))


async def get(engine, key: ApiKey | None, name: str) -> dict:
    router = await engine.client.drive(router_admin.get_router(name))
    check_name(key, router["source"])
    check_name(key, router["dest"])
    return router


async def delete(engine, key: ApiKey | None, name: str) -> dict:
    try:
        await get(engine, key, name)      # the prefix checks of its source and dest
    except TopicsError as error:
        if error.code != ErrorCode.ROUTER_NOT_FOUND:
            raise
        return {"router": name, "deleted": False}
    return await engine.client.drive(router_admin.delete_router(name))


async def list_page(engine, key: ApiKey | None, params: dict[str, str]) -> dict:
    size = params.get("page_size")
    return await engine.client.drive(router_admin.list_routers(
        params.get("prefix", ""), params.get("source"), params.get("dest"),
        int(size) if size and size.isdigit() else None, params.get("cursor") or None,
        lambda r: _allowed(key, r)))
