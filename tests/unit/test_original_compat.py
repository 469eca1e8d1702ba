"""Where a user of the original would notice: TOPICS_HOST=host:port, TOPICS_HOT_RETAIN_BYTES
and the original's WAL metric names and fsync latency histogram beside ours."""

from __future__ import annotations

import pytest

from topics_actors.config import NodeConfig, NodeWiring, reclaimer_options, split_host
from topics_actors.gateway.engine_link import Census
from topics_actors.gateway.metrics_report import MetricsInput, metrics_text
from topics_actors.reclaimer.segment_upkeep import cold_count
from topics_actors.shard.shard_stats import ShardStats

pytestmark = pytest.mark.timeout(10)


def test_topics_host_may_carry_the_port():
    assert split_host("127.0.0.1") == ("127.0.0.1", None)
    assert split_host("0.0.0.0:4100") == ("0.0.0.0", 4100)
    assert split_host("[::1]:4100") == ("::1", 4100)
    assert split_host("::1") == ("::1", None)
    assert split_host("[::1]") == ("::1", None)
    with pytest.raises(SystemExit, match="must be an integer"):
        split_host("host:http")
    config = NodeConfig.from_env({"TOPICS_HOST": "127.0.0.1:4100", "TOPICS_PORT": "9"})
    assert (config.host, config.http_port, config.front_port()) == ("127.0.0.1", 4100, 4101)
    assert NodeConfig.from_env({"TOPICS_PORT": "9"}).http_port == 9


def test_hot_retain_bytes_is_read_and_passed_to_the_reclaimer():
    config = NodeConfig.from_env({"TOPICS_HOT_RETAIN_BYTES": "1048576"})
    assert config.hot_retain_bytes == 1 << 20
    with pytest.raises(SystemExit, match="must not be negative"):
        NodeConfig.from_env({"TOPICS_HOT_RETAIN_BYTES": "-1"}).validate()
    wiring = NodeWiring("ipc:///run/control.sock", "tcp://127.0.0.1:4001", 4001, "/run", 7, 1)
    assert reclaimer_options(config, wiring).hot_retain_bytes == 1 << 20


def test_cold_count_takes_the_stricter_bound():
    sizes = [100, 100, 100, 100, 100]          # oldest first
    assert cold_count(sizes, 4, 0) == 1        # the segment count alone
    assert cold_count(sizes, 4, 250) == 3      # the newest two fit in 250 bytes
    assert cold_count(sizes, 1, 250) == 4      # the count is stricter
    assert cold_count(sizes, 4, 1000) == 1
    assert cold_count([300, 100], 4, 250) == 1
    assert cold_count([100, 300], 4, 250) == 2  # the newest alone is too big: all go
    assert cold_count([], 4, 250) == 0


def test_fsync_latency_lands_in_the_originals_buckets():
    stats = ShardStats()
    for us in (40, 50, 51, 900, 200_000):
        stats.observe_fsync(us * 1000)
    flat = stats.as_dict()
    assert "fsync_buckets" not in flat
    assert (flat["fsync_le_50_us"], flat["fsync_le_100_us"], flat["fsync_le_1000_us"],
            flat["fsync_le_inf_us"]) == (2, 1, 1, 1)
    assert flat["fsync_us_sum"] == 40 + 50 + 51 + 900 + 200_000


def test_metrics_keep_ours_and_add_the_originals_names():
    stats = ShardStats(batches=3, syncs=2, records=70, throttled=1, bytes_written=999)
    stats.observe_fsync(80_000)
    stats.observe_fsync(3_000_000)
    wal = {k: v * 2 for k, v in stats.as_dict().items()}     # two shards alike
    text = metrics_text(MetricsInput(Census(), True, 1.0, 5, wal)).decode()
    lines = set(text.splitlines())
    for line in ("topics_wal_syncs_total 4", "topics_wal_fsyncs_total 4",
                 "topics_wal_records_total 140", "topics_wal_frames_total 140",
                 "topics_wal_batches_total 6", "topics_wal_bytes_written_total 1998",
                 "topics_wal_throttled_total 2", "topics_wal_submit_full_total 2",
                 'topics_wal_fsync_latency_us_bucket{le="50"} 0',
                 'topics_wal_fsync_latency_us_bucket{le="100"} 2',
                 'topics_wal_fsync_latency_us_bucket{le="5000"} 4',
                 'topics_wal_fsync_latency_us_bucket{le="+Inf"} 4',
                 "topics_wal_fsync_latency_us_sum 6160", "topics_wal_fsync_latency_us_count 4",
                 "# TYPE topics_wal_fsync_latency_us histogram"):
        assert line in lines, line
    assert "fsync_le_" not in text
