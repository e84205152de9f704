"""A Prometheus configuration rendered from infersight.yaml: our exporters and the rules of ``alerts build``.

Every exporter job scrapes with ``honor_labels: true``: the engine and gateway collectors serve
series whose ``instance`` label is the engine endpoint (DESIGN 10), exactly as a direct scrape of
the engine would label them, and Prometheus must keep it rather than overwrite it with the
collector's address. Job names are ``prometheus.job_prefix`` + the component, and must match
``thresholds.exporter_jobs``: that regex is how the exporter-down alert and the pipeline dashboard
find our jobs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infersight.config import Config
from infersight.instances import instance_name
from infersight.listen import parse_listen

DURATION = re.compile(r"^[0-9]+(ms|s|m|h)$")


class RenderError(ValueError):
    """The config cannot give a working Prometheus configuration; the message says what to change."""


@dataclass(frozen=True)
class Job:
    component: str  # gpu, engine, gateway, proxy, receiver
    listener: str  # the listeners.* key whose address the job scrapes
    command: str  # what runs there


JOBS: dict[str, Job] = {job.component: job for job in (
    Job("gpu", "gpu_exporter", "infersight collect gpu"),
    Job("engine", "engine_exporter", "infersight collect engine"),
    Job("gateway", "gateway_exporter", "infersight collect gateway"),
    Job("proxy", "proxy", "infersight proxy"),
    Job("receiver", "otlp_http", "infersight up / infersight receive"),
)}


@dataclass(frozen=True)
class Scrape:
    """Where a job scrapes when not at its ``listeners.*`` address (the demo's fleet on free ports).

    ``targets`` are static addresses; ``file_sd`` a file_sd JSON file instead, re-read every global
    scrape interval (nodes that appear join within a scrape). ``interval`` is the job's own scrape
    interval and timeout, for an exporter slower to answer than the global interval allows.
    ``reads`` replaces the header comment that says where the exporter gets its data."""

    targets: Sequence[str] = ()
    file_sd: str | None = None
    metrics_path: str | None = None
    interval: str | None = None
    reads: str | None = None


def default_components(config: Config) -> list[str]:
    """What a config runs: the GPU exporter and the receiver always, the collectors it gives targets to."""
    components = ["gpu"]
    if config.engines.targets or config.engines.file_sd:
        components.append("engine")
    if config.gateways.targets:
        components.append("gateway")
    components.append("receiver")
    return components


def job_name(config: Config, component: str) -> str:
    return config.prometheus.job_prefix + component


def _target(listen: str, host: str | None) -> str:
    address = parse_listen(listen)
    if host:
        bound = host.strip("[]")
    elif address.is_wildcard:
        bound = "127.0.0.1"  # bound to every address: Prometheus on this machine reaches it on loopback
    else:
        bound = address.host
    return instance_name(bound, address.port)


def _reads(config: Config, component: str) -> str:
    """A comment line saying where the job's exporter gets its data."""
    if component == "gpu":
        gpus = config.gpus
        if gpus.backend == "dcgm":
            urls = ", ".join(s.url for s in gpus.dcgm.sources) or "no gpus.dcgm.sources yet"
            return f"dcgm-exporter: {urls}"
        return f"backend {gpus.backend}"
    if component == "engine":
        engines = config.engines
        parts = [f"{len(engines.targets)} engine target(s)"]
        if engines.file_sd:
            parts.append(f"file_sd {engines.file_sd}")
        return ", ".join(parts)
    if component == "gateway":
        kinds = sorted({t.kind for t in config.gateways.targets})
        return f"{len(config.gateways.targets)} gateway target(s): {', '.join(kinds) or 'none yet'}"
    if component == "proxy":
        return "request metrics of the instrumenting proxy"
    return "the OTLP receivers' own health"


def rule_file_glob(rules_dir: str, out: str | None) -> str:
    """``DIR/rules/*.yml`` of an ``alerts build --out DIR``. Prometheus resolves rule_files relative to its
    config file: relative to ``out`` when the config is written there, else absolute (printed, its
    place is unknown)."""
    rules = Path(rules_dir) / "rules"
    if not rules.is_absolute():
        rules = Path(os.path.relpath(rules.resolve(), Path(out).resolve().parent)) if out else rules.resolve()
    return str(rules / "*.yml")


def _job(name: str, scrape: Scrape, refresh: str) -> dict[str, Any]:
    job: dict[str, Any] = {"job_name": name, "honor_labels": True}
    if scrape.interval:
        job["scrape_interval"] = job["scrape_timeout"] = scrape.interval
    if scrape.metrics_path:
        job["metrics_path"] = scrape.metrics_path
    if scrape.file_sd:
        job["file_sd_configs"] = [{"files": [scrape.file_sd], "refresh_interval": refresh}]
    else:
        job["static_configs"] = [{"targets": list(scrape.targets)}]
    return job


def render(config: Config, components: Sequence[str] | None = None, *, rules_dir: str | None = None,
           out: str | None = None, scrape_interval: str = "15s", host: str | None = None,
           alertmanagers: Sequence[str] = (), scrapes: Mapping[str, Scrape] | None = None,
           ) -> tuple[dict[str, Any], list[str]]:
    """The configuration as a dict, and the comment lines that head the YAML. ``scrapes`` gives a
    component's job other addresses than its listener's (see :class:`Scrape`)."""
    scrapes = scrapes or {}
    for interval in [scrape_interval, *(s.interval for s in scrapes.values() if s.interval)]:
        if not DURATION.match(interval):
            raise RenderError(f"--scrape-interval {interval!r}: expected a duration like 15s or 1m")
    components = list(components or default_components(config))
    unknown = [c for c in components if c not in JOBS]
    if unknown:
        raise RenderError(f"unknown job {unknown[0]!r}; expected one of {', '.join(JOBS)}")
    pattern = config.thresholds.exporter_jobs
    scrape_configs, comments = [], []
    for component in dict.fromkeys(components):
        job = JOBS[component]
        name = job_name(config, component)
        if not re.fullmatch(pattern, name):
            raise RenderError(f"job name {name!r} does not match thresholds.exporter_jobs {pattern!r}, so the "
                              "exporter-down alert would not watch it; set prometheus.job_prefix so that "
                              "prefix + component matches, or widen thresholds.exporter_jobs")
        scrape = scrapes.get(component) or Scrape(targets=[_target(getattr(config.listeners, job.listener), host)])
        scrape_configs.append(_job(name, scrape, scrape_interval))
        where = f"file_sd {scrape.file_sd}" if scrape.file_sd else ", ".join(scrape.targets)
        comments.append(f"{name}: {job.command} on {where} ({scrape.reads or _reads(config, component)})")
    document: dict[str, Any] = {"global": {"scrape_interval": scrape_interval,
                                           "evaluation_interval": scrape_interval}}
    if rules_dir is not None:
        document["rule_files"] = [rule_file_glob(rules_dir, out)]
    if alertmanagers:
        document["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
    document["scrape_configs"] = scrape_configs
    return document, comments


def to_yaml(document: dict[str, Any], comments: Sequence[str], rendered_by: str) -> str:
    """prometheus.yml text: a header saying who rendered it and what each job scrapes, then the document."""
    from infersight.alerts.yamlout import dump

    header = [f"# Rendered by {rendered_by} from infersight.yaml.", *(f"# {c}" for c in comments)]
    return "\n".join(header) + "\n" + dump(document)
