"""Run a scenario in virtual time and record what Prometheus would have scraped, once a minute."""

from __future__ import annotations

from collections.abc import Callable

from infersight.config import Config
from infersight.simulator.fleet import Fleet
from infersight.simulator.recorder import Recorder
from infersight.simulator.scenario import Scenario
from infersight.simulator.scrape import FleetScraper

SCRAPE_INTERVAL_S = 60.0  # promtool tests evaluate at 1-minute steps


def simulate(scenario: Scenario, config: Config, epoch: float = 0.0, minutes: int | None = None,
             on_minute: Callable[[int, int], None] | None = None,
             keep: Callable[[str], bool] | None = None) -> tuple[Fleet, Recorder]:
    """The fleet after ``minutes`` (default: the scenario's length) and the series recorded on the way.

    The first scrape is at t = 0, then one every minute up to and including the last minute.
    """
    total = scenario.minutes if minutes is None else minutes
    fleet = Fleet(scenario, config, epoch=epoch)
    scraper = FleetScraper(fleet, keep)
    recorder = Recorder(SCRAPE_INTERVAL_S)
    try:
        for minute in range(total + 1):
            fleet.run_until(minute * SCRAPE_INTERVAL_S)
            recorder.record(scraper.scrape())
            if on_minute:
                on_minute(minute, total)
    finally:
        scraper.close()
    return fleet, recorder
