"""Records for `topics append` from its arguments or stdin: each argument, or each non-empty
stdin line, is one record's `data` as JSON. Every text is parsed before anything is sent,
so one bad text means nothing is appended.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from topics_actors.limits import BATCH_RECORDS_MAX   # the API's batch limit (docs/HTTP.md 8.5)


class BadRecord(ValueError):
    """A text that is not JSON; `where` says which argument or line."""

    def __init__(self, where: str, error: json.JSONDecodeError):
        super().__init__(f"{where} is not JSON: {error.msg} at column {error.colno}")
        self.where = where


def parse_datas(texts: Iterable[str], kind: str) -> list:
    """The parsed value of every text; `kind` names them in errors ("argument", "line")."""
    out = []
    for number, text in enumerate(texts, 1):
        if kind == "line" and not text.strip():
            continue
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError as error:
            raise BadRecord(f"{kind} {number}", error) from None
    return out


def build_records(datas: list, tag: str | None, node: str | None) -> list[dict]:
    records = []
    for data in datas:
        record = {"data": data}
        if tag is not None:
            record["tag"] = tag
        if node is not None:
            record["node"] = node
        records.append(record)
    return records


def chunks(records: list[dict], size: int = BATCH_RECORDS_MAX) -> list[list[dict]]:
    return [records[i:i + size] for i in range(0, len(records), size)]
