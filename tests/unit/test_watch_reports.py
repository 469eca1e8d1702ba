"""How often a watch stream reports its cursor to its session's shard: at most every 250 ms
per stream, at most REPORTS_PER_S_MAX a second for all the streams of a gateway process
(1000 streams at one report per 250 ms each made the reports most of the gateway's work),
never less often than a quarter of the stream's lease, which the reports renew; the
closing report goes at once.
"""

import asyncio

import pytest

from topics_actors.gateway.watch_service import (
    REPORT_INTERVAL_S, REPORTS_PER_S_MAX, CursorReporter, report_interval_s,
)

pytestmark = pytest.mark.timeout(30)


def test_the_interval_grows_with_the_streams_of_the_process():
    assert report_interval_s(1) == REPORT_INTERVAL_S
    assert report_interval_s(100) == REPORT_INTERVAL_S
    for streams in (1000, 5000):
        assert streams / report_interval_s(streams) <= REPORTS_PER_S_MAX
    assert report_interval_s(1000) == pytest.approx(2.5)


class FakeEngine:
    def __init__(self):
        self.sent = []

    async def call(self, wid, msg):
        self.sent.append((msg.cursors, msg.closed))
        return {}


def test_the_lease_bounds_the_interval():
    tasks: set = set()
    reporter = CursorReporter(FakeEngine(), "w", "s", 7000, tasks, lambda: 1000.0)
    assert reporter.interval() == pytest.approx(1.75)
    quick = CursorReporter(FakeEngine(), "w", "s", 35_000, tasks, lambda: 0.25)
    assert quick.interval() == 0.25


def test_reports_wait_their_interval_but_the_closing_one_goes_at_once():
    async def run():
        engine, tasks = FakeEngine(), set()
        reporter = CursorReporter(engine, "w", "s", 35_000, tasks, lambda: 5.0)
        reporter({"t": 1}, False)
        await asyncio.gather(*tasks)
        reporter({"t": 2}, False)            # within the interval: held back
        await asyncio.sleep(0.05)
        assert engine.sent == [({"t": 1}, False)]
        reporter({"t": 3}, True)             # the closing report replaces it, at once
        await asyncio.gather(*tasks)
        return engine.sent
    assert asyncio.run(run()) == [({"t": 1}, False), ({"t": 3}, True)]
