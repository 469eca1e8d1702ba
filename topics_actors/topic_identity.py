"""Stable topic identity and the topic -> shard map.

A topic id is the XXH3-64 of its UTF-8 name (0 is reserved for frames that belong to no
topic, so a name hashing to 0 takes 1). It depends on nothing but the name, so clients route
by themselves and a change of shard count only moves topics.
"""

from __future__ import annotations

import re
import struct

import xxhash

TOPIC_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$")

_LE64 = struct.Struct("<Q")


def topic_id(name: str) -> int:
    return xxhash.xxh3_64_intdigest(name.encode("utf-8")) or 1


def shard_of(tid: int, shard_count: int) -> int:
    """Owning shard of a topic id: xxh3_64(le64(id)) % n, with 0 for n <= 1 or id 0."""
    if shard_count <= 1 or tid == 0:
        return 0
    return xxhash.xxh3_64_intdigest(_LE64.pack(tid)) % shard_count


def shard_of_name(name: str, shard_count: int) -> int:
    return shard_of(topic_id(name), shard_count)


def valid_topic_name(name: object) -> bool:
    return isinstance(name, str) and name.isascii() and TOPIC_NAME_RE.match(name) is not None


ROUTER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}$")   # topics' + ">"


def valid_router_name(name: object) -> bool:
    return isinstance(name, str) and name.isascii() and ROUTER_NAME_RE.match(name) is not None
