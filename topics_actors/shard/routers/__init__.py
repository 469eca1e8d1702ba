"""A shard's routers (spec/api.md 6, docs/ARCHITECTURE.md section 7), each owned by its
destination's shard.

- `router_book.py`: define, list, delete; `router_sync`; a RouterPass of copied records.
- `router_feed.py` (shell): one long-polling diff per router against its source's shard.
"""
