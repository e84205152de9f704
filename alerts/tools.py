"""Run the real checkers: promtool (rules and their unit tests) and amtool (Alertmanager config, routes).

promtool takes every file in one invocation, so checking rules costs one process start. Its unit
tests run one file after another on one core, and the generated ones hold megabytes of incident
series: :func:`test_rules` spreads the files over one promtool per core.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 600  # the promtool suite holds hours of incident series; a loaded CI machine is slow


class ToolMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    output: str


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolMissing(f"{name} not found on PATH (Debian: apt-get install --no-install-recommends "
                          "prometheus prometheus-alertmanager)")
    return path


def _run(args: Sequence[str], cwd: Path | None = None) -> ToolResult:
    try:
        done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return ToolResult(False, f"{Path(args[0]).name} did not finish within {TIMEOUT_S} s")
    return ToolResult(done.returncode == 0, (done.stdout + done.stderr).strip())


def check_rules(rule_files: Sequence[Path]) -> ToolResult:
    return _run([_binary("promtool"), "check", "rules", *map(str, rule_files)])


def test_rules(test_files: Sequence[Path]) -> ToolResult:
    """``promtool test rules`` over every file, the files split into one promtool per core (largest
    first, each to the least loaded run); the output is each file's report in the order given, as one
    promtool over all of them prints it."""
    # promtool resolves each test file's rule_files relative to that file, so one run covers many folders.
    promtool = _binary("promtool")
    paths = [Path(f).resolve() for f in test_files]
    runs: list[list[Path]] = [[] for _ in range(max(1, min(len(paths), os.cpu_count() or 1)))]
    loads = [0] * len(runs)
    for path in sorted(paths, key=lambda p: p.stat().st_size if p.exists() else 0, reverse=True):
        lightest = loads.index(min(loads))
        runs[lightest].append(path)
        loads[lightest] += path.stat().st_size if path.exists() else 0
    with ThreadPoolExecutor(len(runs)) as pool:
        results = list(pool.map(lambda files: _run_each(promtool, files), runs))
    reports = {path: report for result in results for path, report in result.items()}
    ok = all(report.ok for report in reports.values())
    return ToolResult(ok, "\n".join(reports[path].output for path in paths if reports[path].output))


def _run_each(promtool: str, files: Sequence[Path]) -> dict[Path, ToolResult]:
    return {path: _run([promtool, "test", "rules", str(path)]) for path in files}


def check_config(config_file: Path) -> ToolResult:
    """``promtool check config``: the Prometheus configuration and the rule files it names."""
    return _run([_binary("promtool"), "check", "config", str(config_file)])


def check_alertmanager(config_file: Path) -> ToolResult:
    return _run([_binary("amtool"), "check-config", str(config_file)])


def route_receivers(config_file: Path, labels: Mapping[str, str]) -> list[str]:
    """The receivers Alertmanager's own routing picks for an alert with these labels."""
    result = _run([_binary("amtool"), "config", "routes", "test", f"--config.file={config_file}",
                   *(f"{k}={v}" for k, v in labels.items())])
    if not result.ok:
        raise RuntimeError(f"amtool config routes test failed: {result.output}")
    lines = [line for line in result.output.splitlines() if line and not line.startswith("Warning:")]
    return lines[-1].split(",") if lines else []
