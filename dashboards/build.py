"""``infersight dashboards build``: every dashboard as Grafana JSON plus the provisioning files.

Output layout (point Grafana's ``paths.provisioning`` at ``DIR/provisioning``)::

    DIR/dashboards/<uid>.json
    DIR/provisioning/dashboards/infersight.yaml    the file provider, reading DIR/dashboards
    DIR/provisioning/datasources/infersight.yaml   Prometheus (prometheus.url), ClickHouse (clickhouse.dsn)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infersight.config import Config
from infersight.dashboards import breaker, canary, capacity, engines, fleet, gpus, instance, pd, pipeline, traces
from infersight.dashboards.datasources import dashboards_provider_yaml, datasources_yaml
from infersight.thresholds import Thresholds, thresholds_from_config

BUILDERS: tuple[Callable[[Config, Thresholds], dict], ...] = (
    fleet.build, engines.build, gpus.build, pipeline.build, traces.build, instance.build, capacity.build,
    breaker.build, canary.build, pd.build)


@dataclass(frozen=True)
class Written:
    path: Path
    kind: str  # dashboard, datasources, dashboard provider
    title: str
    panels: int = 0


def dashboard_json(dashboard: dict) -> dict:
    """The dashboard as the plain JSON Grafana imports (a deep copy; refuses NaN and non-JSON values)."""
    return json.loads(json.dumps(dashboard, allow_nan=False))


def all_dashboards(config: Config) -> list[dict]:
    """Every dashboard as JSON; raises ThresholdsError for thresholds that make no sense."""
    limits = thresholds_from_config(config)
    return [dashboard_json(build(config, limits)) for build in BUILDERS]


def panel_count(dashboard: dict) -> int:
    return sum(1 for p in dashboard["panels"] if p["type"] != "row")


def render_all(config: Config, dashboards_path: Path) -> list[tuple[str, str, str, int]]:
    """(relative path, text, kind, panels) of every output file; nothing written, so errors write nothing."""
    files = []
    for board in all_dashboards(config):
        files.append((f"dashboards/{board['uid']}.json", json.dumps(board, indent=2, sort_keys=True) + "\n",
                      board["title"], panel_count(board)))
    files.append(("provisioning/datasources/infersight.yaml", datasources_yaml(config), "datasources", 0))
    files.append(("provisioning/dashboards/infersight.yaml", dashboards_provider_yaml(dashboards_path),
                  "dashboard provider", 0))
    return files


def build(config: Config, out: str | Path, dashboards_path: str | None = None) -> list[Written]:
    """Write everything into ``out``; ``dashboards_path`` is where Grafana will find the JSON files
    (default: ``out/dashboards`` as an absolute path on this machine)."""
    out = Path(out)
    target = Path(dashboards_path) if dashboards_path else (out / "dashboards").resolve()
    written = []
    for relative, text, title, panels in render_all(config, target):
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        kind = "dashboard" if relative.startswith("dashboards/") else title
        written.append(Written(path, kind, title if kind == "dashboard" else "", panels))
    return written
