"""``infersight simulate``: a scenario's series in virtual time, for promtool tests and backfill."""

from __future__ import annotations

import datetime as dt
import functools
import json
import sys
import time
from pathlib import Path

import yaml

from infersight.alerts.yamlout import SafeDumper
from infersight.commands.output import fail
from infersight.config import Config

FORMATS = ("promtool", "openmetrics")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="write a simulated fleet's series (promtool input, OpenMetrics) for a scenario",
        description="Run a scenario in virtual time (hours in seconds) and write, once per simulated minute, the "
                    "series our producers would expose: promtool input_series (series.yml, for 'promtool test "
                    "rules') and OpenMetrics (series.om, for 'promtool tsdb create-blocks-from openmetrics').",
        epilog="Scenarios: " + ", ".join(_builtin_names()) + ". 'infersight simulate --list' describes them.")
    p.add_argument("--scenario", metavar="NAME|FILE", help="a built-in scenario name or a scenario YAML file")
    p.add_argument("--hours", type=float, metavar="H", help="how long to simulate (default: the scenario's length)")
    p.add_argument("--out", metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--format", dest="formats", choices=(*FORMATS, "both"), default="both",
                   help="which files to write (default: %(default)s)")
    p.add_argument("--start", metavar="ISO",
                   help="wall-clock time of the first OpenMetrics sample, UTC (default: now minus the run)")
    p.add_argument("--list", action="store_true", help="list the built-in scenarios and exit")
    p.add_argument("--check", action="store_true",
                   help="the alert-quality check: run the scenario (default: every built-in one) through the "
                        "generated rules in promtool and print the scenario x alert table; exit 1 on a failure")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.set_defaults(func=run_simulate)


def _builtin_names() -> list[str]:
    from infersight.simulator.scenario import builtin

    return list(builtin())


_fail = functools.partial(fail, "simulate")


def _progress(quiet: bool):
    tty = sys.stderr.isatty()
    started = time.monotonic()

    def show(minute: int, total: int) -> None:
        if quiet:
            return
        if tty:
            filled = 30 * minute // max(1, total)
            end = "\n" if minute == total else ""
            print(f"\r  [{'#' * filled}{'.' * (30 - filled)}] minute {minute}/{total} "
                  f"({time.monotonic() - started:.0f}s)", end=end, file=sys.stderr, flush=True)
        elif minute == total or minute % max(1, total // 4) == 0:
            print(f"  minute {minute}/{total}", file=sys.stderr, flush=True)

    return show


def run_simulate(args, config: Config) -> int:
    from infersight.simulator.run import simulate
    from infersight.simulator.scenario import ScenarioError, builtin, find, load

    if args.list:
        for name, path in builtin().items():
            s = load(path)
            print(f"{name:28} {s.minutes / 60:4.1f} h  {s.title}")
        return 0
    if args.check:
        return _check(args, config)
    if not args.scenario or not args.out:
        return _fail("--scenario and --out are required (or --list, or --check); see --help")
    try:
        scenario = find(args.scenario)
    except ScenarioError as exc:
        return _fail(str(exc))
    minutes = scenario.minutes
    if args.hours is not None:
        if not 0 < args.hours <= 24:
            return _fail(f"--hours must be more than 0 and at most 24, got {args.hours:g}")
        minutes = round(args.hours * 60)
        if minutes < 1:
            return _fail("--hours is shorter than one scrape minute")
    start = None
    if args.start:
        try:
            start = dt.datetime.fromisoformat(args.start).replace(tzinfo=dt.UTC).timestamp()
        except ValueError:
            return _fail(f"--start {args.start!r} is not an ISO date-time, e.g. 2026-12-01T08:00:00")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return _fail(f"cannot create {out}: {exc}", 1)
    formats = FORMATS if args.formats == "both" else (args.formats,)
    written = []
    if "promtool" in formats:
        # promtool's clock starts at 0 (1970): the start-time gauges must count from there too.
        _fleet, recorder = simulate(scenario, config, epoch=0.0, minutes=minutes, on_minute=_progress(args.quiet))
        path = out / "series.yml"
        with path.open("w") as f:
            yaml.dump({"interval": "1m", "input_series": recorder.input_series()}, f, Dumper=SafeDumper,
                      width=1 << 30, sort_keys=False)
        written.append(path)
    if "openmetrics" in formats:
        if start is None:
            start = (time.time() // 60) * 60 - minutes * 60
        _fleet, recorder = simulate(scenario, config, epoch=start, minutes=minutes, on_minute=_progress(args.quiet))
        path = out / "series.om"
        recorder.write_openmetrics(path, start)
        written.append(path)
    summary = {"scenario": scenario.name, "minutes": minutes, "series": len(recorder.series),
               "files": [str(p) for p in written]}
    (out / "scenario.json").write_text(json.dumps({**summary, "onset_minute": scenario.onset_minute,
                                                   "expect": [e.model_dump(mode="json") for e in scenario.expect]},
                                                  indent=2))
    if not args.quiet:
        print(f"{scenario.name}: {minutes} simulated minutes, {len(recorder.series)} series")
        for p in written:
            print(f"  {p}")
        if "promtool" in formats:
            print("  use as a promtool test's input_series (interval 1m, evaluation at minute N)")
        if "openmetrics" in formats:
            print(f"  backfill: promtool tsdb create-blocks-from openmetrics {out / 'series.om'} DATA_DIR")
    return 0


def _check(args, config: Config) -> int:
    from infersight.alerts.tools import ToolMissing
    from infersight.simulator import quality
    from infersight.simulator.scenario import ScenarioError, builtin, find, load

    try:
        scenarios = [find(args.scenario)] if args.scenario else [load(p) for p in builtin().values()]
    except ScenarioError as exc:
        return _fail(str(exc))
    results = []
    for scenario in scenarios:
        if not args.quiet:
            print(f"{scenario.name}: {scenario.minutes} simulated minutes", file=sys.stderr)
        try:
            results.append(quality.run(scenario, config, on_minute=_progress(args.quiet)))
        except ToolMissing as exc:
            return _fail(str(exc), 1)
        except quality.QualityError as exc:
            return _fail(str(exc), 1)
    print(quality.table(results))
    return 0 if all(r.ok for r in results) else 1
