"""``infersight demo``: the whole stack on this machine, on the simulated fleet, in compressed real time.

1. the embedded ClickHouse (writer for the receiver, reader for every question, DESIGN 11) and
   the OTLP receivers;
2. the generated rules and Alertmanager routing on the demo's compressed clock
   (:mod:`infersight.alerts.timescale`), a real Alertmanager whose receivers all point at a webhook
   in this process (what reached on-call), and a real Prometheus scraping every exporter each second;
3. the scenario's fleet (:mod:`infersight.simulator`) at 60 simulated seconds per real second: its
   engines serve vLLM-format /metrics over HTTP to the real engine collector, its GPUs are the GPU
   exporter's simulated backend driven by the engines' load, its gateway serves its request and
   instance-health series, and every request is replayed through the real RequestTracer and OTLP
   into the receiver (:mod:`.demo_replay`);
4. what happened: alerts from Prometheus and Alertmanager, the slowest requests and their
   neighbours and the pools side by side from ClickHouse, the incident report.
Everything binds 127.0.0.1 on free ports; every process it starts is stopped by its PID at the end,
on an error and on Ctrl-C.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path

from infersight.commands.output import Format, OutputError, add_format_flag, fail, output_folder
from infersight.config import Config

SPEED = 60.0  # simulated seconds per real second: one simulated minute a second
SCRAPE = "1s"  # Prometheus scrapes and evaluates once a (real) second: once a simulated minute
LOOKBACK = "5s"  # Prometheus's 5-minute staleness window, on the compressed clock
DEFAULT_SCENARIO = "rollout-spike"
HEAD_RATIO = 0.05  # share of requests whose spans are all recorded; slow and failed ones always are
STEPS = 5


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="run the whole stack on a simulated fleet: ClickHouse, receivers, collectors, Prometheus, "
                     "Alertmanager, an incident, the report",
        description="Start the embedded stack, a real Prometheus and Alertmanager, and a simulated fleet living "
                    "through an incident scenario at one simulated minute per real second; then print which "
                    "alerts fired and reached on-call, the slowest requests and their neighbours, the pools side "
                    "by side, and write the incident report. Prometheus evaluates the generated rules on the "
                    "demo's compressed clock: every window and `for:` divided by 60 (5m reads 5 s), thresholds "
                    "unchanged. Everything binds 127.0.0.1 on free ports and stops at the end (or on Ctrl-C).",
        epilog="Scenarios: 'infersight simulate --list'. Prometheus and Alertmanager come from Debian "
               "(make debian-tools).")
    p.add_argument("--scenario", default=DEFAULT_SCENARIO, metavar="NAME|FILE",
                   help="a built-in scenario or a scenario YAML file (default: %(default)s)")
    p.add_argument("--minutes", type=int, metavar="N",
                   help="simulated minutes to run, one real second each (default: the scenario's length)")
    p.add_argument("--out", default=".infersight/demo", help="folder for data, rules and the report "
                                                             "(default: %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep the previous demo data instead of starting afresh")
    add_format_flag(p, choices=(Format.TABLE, Format.JSON),
                    help="table for people, json for scripts (one summary object)")
    p.set_defaults(func=run_demo)


def _fail(message: str, code: int = 2) -> int:
    return fail("demo", message, code)


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: stop everything, then exit."""


def _terminated(signum, frame) -> None:
    raise Terminated()


def run_demo(args, config: Config) -> int:
    from infersight.commands import demo_stack
    from infersight.commands.demo_stack import StackError
    from infersight.simulator.scenario import ScenarioError, find

    try:
        scenario = find(args.scenario)
    except ScenarioError as exc:
        return _fail(str(exc))
    minutes = scenario.minutes if args.minutes is None else args.minutes
    if not 1 <= minutes <= scenario.minutes:
        return _fail(f"--minutes must be between 1 and the scenario's {scenario.minutes}, got {minutes}")
    try:
        binaries = demo_stack.require_binaries()
    except StackError as exc:
        return _fail(str(exc), 1)
    try:
        out = _demo_folder(Path(args.out), keep=args.keep)
    except OutputError as exc:
        return _fail(str(exc))
    from infersight.commands.demo_run import DemoRun

    run = DemoRun(config, scenario, minutes, out, binaries, quiet=args.format == Format.JSON)
    previous = signal.signal(signal.SIGTERM, _terminated)  # a `kill` or a CI timeout stops it as Ctrl-C does
    try:
        summary = run.run()
    except KeyboardInterrupt as exc:
        run.stop_all()
        print(f"\ninfersight demo: {'terminated' if isinstance(exc, Terminated) else 'interrupted'} at simulated "
              f"minute {run.minute():.0f}; everything it started is stopped", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except StackError as exc:
        run.stop_all()
        return _fail(str(exc), 1)
    finally:
        run.stop_all()
        signal.signal(signal.SIGTERM, previous)
    from infersight.commands.demo_summary import print_summary

    if args.format == Format.JSON:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    return 0


# Written into every demo folder: only a folder holding it is ever deleted for a fresh start.
DEMO_MARKER = ".infersight-demo"


def _demo_folder(out: Path, keep: bool) -> Path:
    """The demo's folder, emptied unless ``keep``; refuses to delete a folder the demo did not make."""
    if out.is_dir() and not keep and any(out.iterdir()):
        # An older demo's folder (before the marker) is known by its embedded ClickHouse data.
        if not (out / DEMO_MARKER).is_file() and not (out / "clickhouse").is_dir():
            raise OutputError(f"--out {out}: the folder holds files the demo did not write; "
                              "give an empty or new folder (the demo deletes its folder's contents)")
        shutil.rmtree(out)
    folder = output_folder(out)
    try:
        (folder / DEMO_MARKER).write_text("written by infersight demo; the next demo run may delete this folder\n")
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot write into the folder ({exc.strerror or exc})") from None
    return folder


class Every:
    """``due()`` is true at most once every ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.next_at = seconds, 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now < self.next_at:
            return False
        self.next_at = now + self.seconds
        return True


class Progress:
    """A bar on a terminal (stderr), a line every tenth of the run in a log; silent for json."""

    def __init__(self, total_minutes: int, onset: float | None, quiet: bool) -> None:
        self.total, self.onset, self.quiet = total_minutes, onset, quiet
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()
        self.last_line = -1
        self.every = Every(0.25)  # at most a few redraws a second

    def show(self, minute: float, firing: list[str], held_s: float = 0.0) -> None:
        if self.quiet:
            return
        m = int(minute)
        incident = "" if self.onset is None else (" before onset" if m < self.onset else f" onset+{m - self.onset:g}")
        alerts = f"  firing: {', '.join(firing)}" if firing else ""
        if held_s >= 1:  # said while it happens, not only in the summary
            incident += f", machine busy: {held_s:.0f}s behind"
        if self.tty:
            filled = 30 * m // max(1, self.total)
            print(f"\r\033[K      [{'#' * filled}{'.' * (30 - filled)}] minute {m}/{self.total}{incident} "
                  f"({time.monotonic() - self.started:.0f}s){alerts}"[:200], end="", file=sys.stderr, flush=True)
        elif m // max(1, self.total // 10) != self.last_line or m == self.total:
            self.last_line = m // max(1, self.total // 10)
            print(f"      minute {m}/{self.total}{incident}{alerts}", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty and not self.quiet:
            print(file=sys.stderr, flush=True)
