"""Reading one planned seq range from a node, page by page, as Arrow batches.

Involuntary loss inside the range (eviction by cap or TTL, a recreated topic) comes back
from the server as a tombstone at the cursor. With failOnDataLoss the read fails with
DataLossError (the Kafka source's default); without it the gap is logged and skipped.
Permanent deletes are silent by design and never count as loss.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa

from topics_actors.client import Client
from topics_actors.spark.arrow_columns import batch_from_scan
from topics_actors.spark.planning import SeqRange

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Records a planned range should have held are gone (evicted, expired, recreated)."""


def _lost(rng: SeqRange, gap_from: int, gap_to: int, reason: str, fail: bool) -> None:
    gap_to = min(gap_to, rng.until_seq)
    message = (f"topic {rng.topic!r}: seqs {gap_from}..{gap_to} of the planned range "
               f"({rng.after_seq}, {rng.until_seq}] are gone ({reason})")
    if fail:
        raise DataLossError(message + "; set failOnDataLoss=false to skip such gaps")
    log.warning("event=data_loss topic=%s gap_from=%d gap_to=%d reason=%s",
                rng.topic, gap_from, gap_to, reason)


def read_range(client: Client, rng: SeqRange, page_size: int,
               fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    cursor = rng.after_seq
    while cursor < rng.until_seq:
        reply = client.scan(rng.topic, cursor, rng.until_seq, page_size)
        tombstone = reply["tombstone"]
        if tombstone is not None and tombstone["reason"] == "recreated":
            # The cursor is past the head: the topic was recreated and starts over; what
            # it holds now is not what was planned.
            _lost(rng, cursor + 1, rng.until_seq, "recreated", fail_on_data_loss)
            return
        if tombstone is not None:
            _lost(rng, cursor + 1, tombstone["gap_to"], tombstone["reason"],
                  fail_on_data_loss)
        if reply["count"]:
            yield batch_from_scan(reply)
        following = reply["next_from_seq"]
        if following <= cursor or (reply["caught_up"] and following < rng.until_seq):
            # The head is below the planned end: the topic lost records (recreated).
            _lost(rng, max(cursor, following) + 1, rng.until_seq, "recreated",
                  fail_on_data_loss)
            return
        cursor = following
