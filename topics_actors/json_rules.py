"""What JSON the engine takes as a record's data or meta, on every surface alike.

- Nesting: at most JSON_DEPTH_MAX levels of arrays and objects. orjson, which writes every
  JSON text the engine produces, refuses deeper values, so a deeper record could be stored
  but not always answered: it is refused where it comes in.
- Integers: within [INT_MIN, INT_MAX] (a signed 64-bit minimum, an unsigned 64-bit
  maximum: what orjson reads and writes exactly). orjson reads a larger integer literal as a
  float without a word, which would change the data; such a text is refused instead.

Both checks cost next to nothing on ordinary records: a value can only be too deep when its
text is long enough to hold that many brackets, and an integer can only be out of range
when its text has a run of at least INT_DIGITS_MIN digits; only then is the slow check run.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from topics_actors.errors import TopicsError, invalid

JSON_DEPTH_MAX = 254
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
INT_DIGITS_MIN = 19                 # 2**63 has 19 digits: shorter literals always fit
_LONG_DIGITS = re.compile(rb"\d{%d,}" % INT_DIGITS_MIN)


def _checked_int(literal: str) -> int:
    value = int(literal)
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(literal)
    return value


def check_integers(text: bytes, what: str) -> None:
    """Refuse a JSON text holding an integer outside [INT_MIN, INT_MAX] (valid JSON assumed:
    call it after a parse succeeded)."""
    if _LONG_DIGITS.search(text) is None:
        return
    try:
        json.loads(text, parse_int=_checked_int)
    except ValueError:
        raise unwritable(what, TypeError("Integer exceeds 64-bit range")) from None


def too_deep(what: str) -> TopicsError:
    return invalid(f"{what} nests arrays and objects deeper than {JSON_DEPTH_MAX} levels")


def unwritable(what: str, error: TypeError) -> TopicsError:
    """invalid_request for a value orjson refused to write (`error`, its TypeError)."""
    if "Recursion" in str(error):
        return too_deep(what)
    if "Integer" in str(error):
        return invalid(f"{what} holds an integer outside the 64-bit range "
                       f"[{INT_MIN}, {INT_MAX}]")
    return invalid(f"{what} cannot be written as JSON: {error}")


def check_depth(text: bytes, value: Any, what: str) -> None:
    """Refuse a parsed value nested deeper than JSON_DEPTH_MAX (`text` is its JSON)."""
    if len(text) > 2 * JSON_DEPTH_MAX:
        try:
            orjson.dumps(value)
        except TypeError:
            raise too_deep(what) from None


def dumps(value: Any, what: str) -> bytes:
    """A value as compact JSON, or invalid_request when it cannot be written exactly (too
    deep, an integer out of range, a key that is not a string)."""
    try:
        return orjson.dumps(value)
    except TypeError as error:
        raise unwritable(what, error) from None
