"""The two datasources every panel names, and Grafana's provisioning files for them and the dashboards.

Panels refer to datasources by fixed uids, so the dashboards import unchanged into any Grafana
whose provisioning created those uids (what :func:`datasources_yaml` writes).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import yaml

from infersight.config import Config

PROMETHEUS_UID = "infersight-prometheus"
CLICKHOUSE_UID = "infersight-clickhouse"
CLICKHOUSE_PLUGIN = "grafana-clickhouse-datasource"
PROMETHEUS_REF = {"type": "prometheus", "uid": PROMETHEUS_UID}
CLICKHOUSE_REF = {"type": CLICKHOUSE_PLUGIN, "uid": CLICKHOUSE_UID}
# Grafana expands environment variables in provisioning files: the password stays out of the output.
PASSWORD_ENV = "INFERSIGHT_CLICKHOUSE_PASSWORD"
FOLDER = "infersight"


class ProvisioningError(ValueError):
    """A config value Grafana cannot use as a datasource; the message says what to set instead."""


def clickhouse_database(dsn: str) -> str:
    """The database named by an ``http(s)://host:port/db`` DSN (``default`` when none)."""
    return urllib.parse.urlsplit(dsn).path.strip("/").split("/")[0] or "default"


def _clickhouse(dsn: str) -> dict:
    parts = urllib.parse.urlsplit(dsn)
    if parts.scheme not in ("http", "https"):
        raise ProvisioningError(
            f"clickhouse.dsn {dsn!r} is not an HTTP endpoint Grafana can reach (chdb:// is an in-process engine); "
            "run 'infersight up' and set clickhouse.dsn to its URL, e.g. http://127.0.0.1:8123/default")
    try:
        port = parts.port or (8443 if parts.scheme == "https" else 8123)
    except ValueError:
        raise ProvisioningError(f"clickhouse.dsn {dsn!r} has an invalid port") from None
    if not parts.hostname:
        raise ProvisioningError(f"clickhouse.dsn {dsn!r} has no host; e.g. http://127.0.0.1:8123/default")
    json_data = {"host": parts.hostname, "port": port, "protocol": "http", "secure": parts.scheme == "https",
                 "defaultDatabase": clickhouse_database(dsn)}
    source = {"name": "infersight ClickHouse", "uid": CLICKHOUSE_UID, "type": CLICKHOUSE_PLUGIN, "editable": False,
              "jsonData": json_data}
    if parts.username:
        json_data["username"] = urllib.parse.unquote(parts.username)
    if parts.password:
        source["secureJsonData"] = {"password": f"${{{PASSWORD_ENV}}}"}
    return source


def _prometheus(url: str | None) -> dict:
    if not url:
        raise ProvisioningError("prometheus.url is not set; the dashboards need it, e.g. http://127.0.0.1:9090")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProvisioningError(f"prometheus.url {url!r} is not an http(s) URL, e.g. http://127.0.0.1:9090")
    return {"name": "infersight Prometheus", "uid": PROMETHEUS_UID, "type": "prometheus", "access": "proxy",
            "url": url, "isDefault": True, "editable": False, "jsonData": {"timeInterval": "15s"}}


def datasources_yaml(config: Config) -> str:
    """Grafana's datasource provisioning file: Prometheus from prometheus.url, ClickHouse from clickhouse.dsn."""
    sources = [_prometheus(config.prometheus.url), _clickhouse(config.clickhouse.dsn)]
    return yaml.safe_dump({"apiVersion": 1, "datasources": sources}, sort_keys=False)


def dashboards_provider_yaml(dashboards_dir: Path) -> str:
    """Grafana's dashboard provider: load every JSON file of ``dashboards_dir`` into the infersight folder."""
    provider = {"name": "infersight", "orgId": 1, "folder": FOLDER, "type": "file", "disableDeletion": False,
                "allowUiUpdates": False, "updateIntervalSeconds": 30,
                "options": {"path": str(dashboards_dir), "foldersFromFilesStructure": False}}
    return yaml.safe_dump({"apiVersion": 1, "providers": [provider]}, sort_keys=False)
