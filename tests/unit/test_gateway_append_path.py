"""The gateway's append path: the cheap look for long digit runs before json_rules'
integer check, and the coalescing of concurrent appends to one topic
(gateway/append_coalescer.py). Method: the prefilter against json_rules itself on bodies
with digit runs in every position; the coalescer against a fake engine whose replies and
refusals are scripted, checking what each caller gets against what it would get alone."""

import pytest

from topics_actors import json_rules
from topics_actors.errors import TopicsError
from topics_actors.gateway import request_body as rb


def _outcome(check, text: bytes):
    try:
        check(text, "the body")
    except TopicsError as error:
        return error.code, error.message
    return None


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", [
    b'{"a":1}', b'{"a":1234567890123456789}', b'{"a":18446744073709551615}',
    b'{"a":18446744073709551616}', b'{"a":-9223372036854775809}',
    b'{"a":"123456789012345678901234"}', b'{"a":[1,2,3],"b":12345678901234567890123}',
    b'{"a":1.12345678901234567890123}', b'{"a":123456789012345678}',
    b'{"x":"' + b"9" * 18 + b'","y":' + b"9" * 25 + b"}",
])
def test_the_digit_run_prefilter_decides_as_json_rules_does(text):
    assert _outcome(rb.check_integers, text) == _outcome(json_rules.check_integers, text)
