"""The node-wide live-bytes quota: slots shared through a file, admission over all of them."""

from __future__ import annotations

import pytest

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.shard.byte_quota import ByteQuota, create_file

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
def quota_file(tmp_path):
    path = str(tmp_path / "live-bytes")
    create_file(path)
    return path


def test_admission_counts_every_shard_and_the_pending_batch(quota_file):
    a, b = ByteQuota(quota_file, 0, 1000), ByteQuota(quota_file, 1, 1000)
    a.admit(400, lambda: 0)
    a.publish(400)
    b.admit(500, lambda: 0)       # 400 + 500 fits
    with pytest.raises(TopicsError) as caught:
        b.admit(101, lambda: 0)   # 400 (a) + 500 pending (b) + 101 > 1000
    assert caught.value.code is ErrorCode.THROTTLED
    assert caught.value.detail["limit"] == "max_total_bytes"
    assert caught.value.detail["max"] == 1000
    b.publish(500)
    b.admit(100, lambda: 500)     # exactly at the quota is allowed
    a.publish(0)                  # a's records deleted: room again
    b.admit(300, lambda: 600)


def test_a_refused_batch_does_not_count_as_pending(quota_file):
    a = ByteQuota(quota_file, 0, 100)
    with pytest.raises(TopicsError):
        a.admit(101, lambda: 0)
    a.admit(100, lambda: 0)


def test_quota_off_touches_no_file(tmp_path):
    off = ByteQuota(None, 0, 1000)
    assert off.max_total_bytes == 0
    off.admit(10**12, lambda: 10**12)   # no limit, no file needed
    off.publish(5)
    zero = ByteQuota(str(tmp_path / "absent"), 0, 0)
    zero.admit(1, lambda: 10**12)


def test_create_file_zeroes_a_stale_file(quota_file):
    a = ByteQuota(quota_file, 3, 100)
    a.publish(100)
    a.close()
    create_file(quota_file)       # a new node start forgets old shards' numbers
    ByteQuota(quota_file, 0, 100).admit(100, lambda: 0)


def test_own_bytes_are_summed_once_then_carried_by_commits(quota_file):
    """The sum over every topic is taken at the first admission only; commits publish it."""
    calls = []
    a = ByteQuota(quota_file, 0, 1000)

    def live() -> int:
        calls.append(1)
        return 300
    a.admit(100, live)
    a.admit(100, live)
    assert len(calls) == 1
    a.publish(500)                # the commit's own sum
    with pytest.raises(TopicsError):
        a.admit(501, live)        # 500 live + 501 > 1000
    assert len(calls) == 1
