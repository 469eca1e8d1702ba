"""The node's recovery quarantine as HTTP shows it: the survey of every shard's quarantined
topics (from their `status`), what readiness says about it, the admin listing and the
repair (docs/HTTP.md section 16, docs/OPERATIONS.md section 14).

Readiness under `park` stays 200 with `degraded: true` and the quarantined names; under
`refuse` it is 503 `not_ready` while any topic is quarantined. A quarantined topic itself
answers 503 `quarantined` from its shard, whatever the route. `QuarantineApi`'s handlers
take (route, request, key, t0); the gateway's handler table (gateway_core.py) names them.
"""

from __future__ import annotations

import dataclasses

from topics_actors.config import RECOVERY_POLICY_DEFAULT, RecoveryPolicy
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, json_response, with_performance,
)
from topics_actors.gateway.route_table import Route
from topics_actors.protocol.messages import RepairTopic


@dataclasses.dataclass
class Survey:
    entries: list = dataclasses.field(default_factory=list)   # each topic's verdict + shard
    policies: set = dataclasses.field(default_factory=set)    # the shards' policies
    total: int = 0            # quarantines found since each shard started, summed
    unaudited: int = 0        # segments the shards' background segment check has yet to read

    @property
    def names(self) -> list[str]:
        return sorted(entry["topic"] for entry in self.entries)

    @property
    def refused(self) -> bool:
        return bool(self.entries) and RecoveryPolicy.REFUSE in self.policies


def survey(statuses: list[dict]) -> Survey:
    found = Survey()
    for status in statuses:
        found.policies.add(RecoveryPolicy(status.get("recovery_policy",
                                                     RECOVERY_POLICY_DEFAULT)))
        found.total += status.get("quarantines_total", 0)
        found.unaudited += status.get("segments_unaudited", 0)
        found.entries += [{"shard": status.get("shard"), **entry}
                          for entry in status.get("quarantine", ())]
    found.entries.sort(key=lambda entry: entry["topic"])
    return found


def ready_fields(found: Survey) -> dict:
    """What GET /v0/ready adds to its 200 body; raises not_ready under `refuse`."""
    if found.refused:
        raise TopicsError("recovery quarantined topics and TOPICS_RECOVERY_ON_MISMATCH is "
                          "refuse: repair them (POST /v0/quarantine/:topic/repair)",
                          ErrorCode.NOT_READY,
                          {"quarantined": found.names,
                           "recovery_policy": RecoveryPolicy.REFUSE})
    return {"degraded": bool(found.entries), "quarantined": found.names}


def listing(found: Survey) -> dict:
    """GET /v0/quarantine: the policy and every quarantined topic with its verdict."""
    # One policy per node (every shard reads the same setting); a list only mid-restart.
    policy = next(iter(found.policies)) if len(found.policies) == 1 else sorted(found.policies)
    return {"recovery_policy": policy, "quarantined": found.entries,
            "quarantines_total": found.total, "segments_unaudited": found.unaudited}


class QuarantineApi:
    def __init__(self, engine):
        self.engine = engine

    async def list(self, route: Route, request: HttpRequest, key: ApiKey | None,
                   t0: int) -> HttpResponse:
        found = survey(await self.engine.shard_statuses())
        return json_response(200, listing(found))

    async def repair(self, route: Route, request: HttpRequest, key: ApiKey | None,
                     t0: int) -> HttpResponse:
        reply = await self.engine.call(route.topic, RepairTopic(route.topic))
        return json_response(200, with_performance(reply, t0))
