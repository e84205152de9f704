"""The two datasources the dashboards read, as dashboard variables, and Grafana's provisioning files.

Every panel, target and query variable names its datasource through a datasource variable
(``${datasource}`` for Prometheus, ``${clickhouse}`` for ClickHouse), never through a fixed uid:

- provisioned (:func:`datasources_yaml` creates the uids below), the variables' saved values pick
  exactly the provisioned datasources;
- imported through Grafana's UI into a site that has its own Prometheus and ClickHouse, the saved
  uid does not exist there, so Grafana selects that site's default datasource of the type, and the
  user can switch in the variable's drop-down. No ``__inputs`` are needed for that, and none are
  written: provisioned dashboards do not resolve ``__inputs``.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import yaml

from infersight.config import Config
from infersight.dsn import Dsn, DsnError
from infersight.dsn import parse as parse_dsn

PROMETHEUS_UID = "infersight-prometheus"
CLICKHOUSE_UID = "infersight-clickhouse"
PROMETHEUS_NAME = "infersight Prometheus"
CLICKHOUSE_NAME = "infersight ClickHouse"
CLICKHOUSE_PLUGIN = "grafana-clickhouse-datasource"
# The datasource variables' names: what panels refer to.
PROMETHEUS_VARIABLE = "datasource"
CLICKHOUSE_VARIABLE = "clickhouse"
PROMETHEUS_REF = {"type": "prometheus", "uid": f"${{{PROMETHEUS_VARIABLE}}}"}
CLICKHOUSE_REF = {"type": CLICKHOUSE_PLUGIN, "uid": f"${{{CLICKHOUSE_VARIABLE}}}"}
# Grafana expands environment variables in provisioning files: the password stays out of the output.
PASSWORD_ENV = "INFERSIGHT_CLICKHOUSE_PASSWORD"
FOLDER = "infersight"
# Prometheus' scrape interval as Grafana should assume it: $__rate_interval is at least 4x this.
SCRAPE_INTERVAL = "15s"


class ProvisioningError(ValueError):
    """A config value Grafana cannot use as a datasource; the message says what to set instead."""


def _parse(dsn: str) -> Dsn:
    try:
        return parse_dsn(dsn, must_exist=False)
    except DsnError as exc:
        raise ProvisioningError(f"clickhouse.dsn: {exc}") from None


def clickhouse_database(dsn: str) -> str:
    """The database a ClickHouse DSN names (``default`` when none)."""
    return _parse(dsn).database


def clickhouse_user(dsn: str) -> str | None:
    """The user a ClickHouse DSN names, or None (then Grafana logs in as the embedded store's reader)."""
    return _parse(dsn).user


def _clickhouse(dsn: str, traces_table: str) -> dict:
    parsed = _parse(dsn)
    if not parsed.is_http:
        raise ProvisioningError(
            f"clickhouse.dsn {dsn!r} is not an HTTP endpoint Grafana can reach (chdb:// is an in-process engine); "
            "run 'infersight up' and set clickhouse.dsn to its URL, e.g. http://127.0.0.1:8123/default")
    json_data = {"host": parsed.host, "port": parsed.port, "protocol": "http", "secure": parsed.scheme == "https",
                 "defaultDatabase": parsed.database,
                 # Explore's trace view and query builder open our trace table (OTel Collector schema).
                 "traces": {"defaultDatabase": parsed.database, "defaultTable": traces_table, "otelEnabled": True,
                            "otelVersion": "latest", "durationUnit": "nanoseconds"}}
    source = {"name": CLICKHOUSE_NAME, "uid": CLICKHOUSE_UID, "type": CLICKHOUSE_PLUGIN, "editable": False,
              "jsonData": json_data}
    # Grafana only reads: without a user in the DSN it is the embedded store's read-only reader
    # (DESIGN 11). The password never goes into the file: Grafana reads it from the environment.
    from infersight.pipelines.clickhouse_users import READER, USERS

    json_data["username"] = parsed.user or USERS[READER]
    source["secureJsonData"] = {"password": f"${{{PASSWORD_ENV}}}"}
    return source


def _prometheus(url: str | None) -> dict:
    if not url:
        raise ProvisioningError("prometheus.url is not set; the dashboards need it, e.g. http://127.0.0.1:9090")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProvisioningError(f"prometheus.url {url!r} is not an http(s) URL, e.g. http://127.0.0.1:9090")
    return {"name": PROMETHEUS_NAME, "uid": PROMETHEUS_UID, "type": "prometheus", "access": "proxy",
            "url": url, "isDefault": True, "editable": False, "jsonData": {"timeInterval": SCRAPE_INTERVAL}}


def datasources_yaml(config: Config) -> str:
    """Grafana's datasource provisioning file: Prometheus from prometheus.url, ClickHouse from clickhouse.dsn."""
    from infersight.pipelines.schema.ddl import Tables

    traces = Tables.from_config(config).traces
    sources = [_prometheus(config.prometheus.url), _clickhouse(config.clickhouse.dsn, traces)]
    return yaml.safe_dump({"apiVersion": 1, "datasources": sources}, sort_keys=False)


def dashboards_provider_yaml(dashboards_dir: Path) -> str:
    """Grafana's dashboard provider: load every JSON file of ``dashboards_dir`` into the infersight folder."""
    provider = {"name": "infersight", "orgId": 1, "folder": FOLDER, "type": "file", "disableDeletion": False,
                "allowUiUpdates": False, "updateIntervalSeconds": 30,
                "options": {"path": str(dashboards_dir), "foldersFromFilesStructure": False}}
    return yaml.safe_dump({"apiVersion": 1, "providers": [provider]}, sort_keys=False)
