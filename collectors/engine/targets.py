"""Engine targets: from the config file, the command line and a Prometheus file_sd file.

A file_sd file is re-read when its modification time, size or inode change (checked at the start
of every collection cycle: one stat call). A bad file keeps the last good targets, as Prometheus
does, and the error is counted and reported.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import yaml

from infersight.instances import instance_name
from infersight.signals.engine import EngineRole

from .engines import ENGINES
from .normalize import TargetLabels
from .scrape import TargetError, check_url

ENGINE_CHOICES = ("auto", *ENGINES)
ROLE_CHOICES = tuple(role.value for role in EngineRole)


@dataclass(frozen=True)
class Target:
    url: str
    engine: str = "auto"  # or one of ENGINES
    # The `instance` label (DESIGN 10): the engine endpoint host:port, the address the gateway routes
    # to and its request metrics name; see default_instance.
    instance: str = ""
    model: str = ""
    pool: str = ""
    node: str = ""
    gpu: str = ""
    role: str = ""  # prefill, decode or mixed; empty: what the engine says, else mixed

    def __post_init__(self) -> None:
        check_url(self.url)
        if self.engine not in ENGINE_CHOICES:
            raise TargetError(f"unknown engine {self.engine!r} for {self.url}; expected one of "
                              f"{', '.join(ENGINE_CHOICES)}")
        if self.role and self.role not in ROLE_CHOICES:
            raise TargetError(f"unknown role {self.role!r} for {self.url}; expected one of {', '.join(ROLE_CHOICES)}")
        if not self.instance:
            object.__setattr__(self, "instance", default_instance(self.url))

    @property
    def fixed_engine(self) -> str | None:
        return None if self.engine == "auto" else self.engine

    def labels(self) -> TargetLabels:
        return TargetLabels(self.instance, self.pool, self.node, self.gpu, self.model, self.role)


def default_instance(url: str) -> str:
    """``host:port`` of the URL (the port defaulted from the scheme, as Prometheus does).

    Engines serve /metrics on the port the gateway routes to, so this is the gateway's name for
    the instance too. A metrics path other than /metrics is kept (``host:port/path``) so that two
    exporters behind one port stay two instances; set ``instance`` to name them otherwise.
    """
    parts = urllib.parse.urlsplit(url)
    instance = instance_name(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    if parts.path not in ("", "/", "/metrics"):
        instance += parts.path
    return instance


def parse_target_arg(spec: str) -> Target:
    """``--target [ENGINE=]URL``, e.g. ``vllm=http://host:8000/metrics``."""
    engine, sep, url = spec.partition("=")
    if not sep or "://" in engine:
        engine, url = "auto", spec
    return Target(url=url, engine=engine.strip().lower())


def from_config(engines_config) -> list[Target]:
    """Targets of the config's ``engines.targets`` list."""
    targets = []
    for i, t in enumerate(engines_config.targets):
        try:
            targets.append(Target(url=t.url, engine=t.engine, instance=t.instance or "", model=t.model or "",
                                  pool=t.pool or "", node=t.node or "", gpu=t.gpu or "",
                                  role=t.role or ""))
        except TargetError as exc:
            raise TargetError(f"engines.targets.{i}: {exc}") from None
    return targets


def check_unique(targets: list[Target]) -> None:
    seen: dict[str, str] = {}
    for target in targets:
        if target.instance in seen:
            raise TargetError(f"two targets with instance {target.instance!r} ({seen[target.instance]} and "
                              f"{target.url}); give one a distinct `instance`")
        seen[target.instance] = target.url


def parse_file_sd(text: str, source: str) -> list[Target]:
    """Targets of a Prometheus file_sd document (JSON, or YAML for .yml/.yaml files).

    Understood labels: ``__scheme__``, ``__metrics_path__``, ``instance`` (default: the target's
    HOST:PORT), ``engine``, ``model``, ``pool``, ``node``, ``gpu``, ``role``; other labels are ignored.
    """
    try:
        data = yaml.safe_load(text) if source.endswith((".yml", ".yaml")) else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise TargetError(f"{source}: not valid {'YAML' if source.endswith(('.yml', '.yaml')) else 'JSON'}: "
                          f"{exc}") from None
    if not isinstance(data, list):
        raise TargetError(f"{source}: expected a list of {{\"targets\": [...], \"labels\": {{...}}}} groups")
    targets: list[Target] = []
    for i, group in enumerate(data):
        where = f"{source}: group {i}"
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            raise TargetError(f"{where}: expected an object with a \"targets\" list of HOST:PORT strings")
        labels = group.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise TargetError(f"{where}: \"labels\" must map names to string values")
        scheme = labels.get("__scheme__", "http")
        path = labels.get("__metrics_path__", "/metrics")
        for address in group["targets"]:
            if not isinstance(address, str) or not address or "/" in address:
                raise TargetError(f"{where}: target {address!r} is not HOST:PORT")
            try:
                targets.append(Target(url=f"{scheme}://{address}{path}", engine=labels.get("engine", "auto"),
                                      instance=labels.get("instance", ""),
                                      model=labels.get("model", ""), pool=labels.get("pool", ""),
                                      node=labels.get("node", ""), gpu=labels.get("gpu", ""),
                                      role=labels.get("role", "")))
            except TargetError as exc:
                raise TargetError(f"{where}: {exc}") from None
    check_unique(targets)
    return targets


class FileSD:
    """A file_sd file, re-read when it changes."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.targets: list[Target] = []
        self.last_error: str | None = None
        self._stamp: tuple | None = None

    def poll(self) -> str | None:
        """Reload if the file changed: 'success', 'error' (targets kept, see last_error) or None."""
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError as exc:
            stamp = ("missing", exc.strerror)
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        if stamp[0] == "missing":
            # Like Prometheus: a removed file removes its targets.
            self.targets = []
            self.last_error = f"{self.path}: {stamp[1]}"
            return "error"
        try:
            self.targets = parse_file_sd(self.path.read_text(), str(self.path))
        except (OSError, UnicodeDecodeError) as exc:
            self.last_error = f"{self.path}: cannot read: {exc}"
            return "error"
        except TargetError as exc:
            self.last_error = str(exc)
            return "error"
        self.last_error = None
        return "success"
