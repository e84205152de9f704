"""Render and check the OpenTelemetry Collector configurations shipped in this folder.

No Collector binary can be installed here, so the configurations are checked the way a reviewer
would: every option is read against the options the components document (``KNOWN_OPTIONS``,
transcribed from the contrib sources: exporter/clickhouseexporter/config.go, the exporterhelper
queue and retry settings, processor/tailsamplingprocessor/config.go ...), the pipelines must only
name defined components, and the ClickHouse exporter must write our schema and not create its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from infersight import attributes as attr
from infersight import dsn as dsn_mod
from infersight.config import Config
from infersight.pipelines import content_filter

FOLDER = Path(__file__).parent
FILES = {"collector": FOLDER / "collector.yaml", "loadbalancer": FOLDER / "loadbalancer.yaml"}
ENV = re.compile(r"\$\{env:([A-Z0-9_]+)\}")

_QUEUE = {"enabled", "num_consumers", "queue_size", "storage", "blocking", "sizer", "wait_for_result"}
_RETRY = {"enabled", "initial_interval", "randomization_factor", "multiplier", "max_interval", "max_elapsed_time"}
_POLICY_TYPES = {"always_sample", "latency", "numeric_attribute", "probabilistic", "status_code", "string_attribute",
                 "rate_limiting", "span_count", "boolean_attribute", "ottl_condition", "trace_state", "composite",
                 "and", "drop", "bytes_limiting"}
# component -> option -> nested options (a set) or None (a scalar / free-form value)
KNOWN_OPTIONS: dict[str, dict[str, set[str] | None]] = {
    "receivers/otlp": {"protocols": {"grpc", "http"}},
    "processors/memory_limiter": {"check_interval": None, "limit_mib": None, "spike_limit_mib": None,
                                  "limit_percentage": None, "spike_limit_percentage": None},
    "processors/batch": {"send_batch_size": None, "send_batch_max_size": None, "timeout": None,
                         "metadata_keys": None, "metadata_cardinality_limit": None},
    "processors/tail_sampling": {"decision_wait": None, "num_traces": None, "expected_new_traces_per_sec": None,
                                 "policies": None, "decision_cache": {"sampled_cache_size", "non_sampled_cache_size"},
                                 "sample_on_first_match": None},
    "exporters/clickhouse": {
        "endpoint": None, "username": None, "password": None, "database": None, "connection_params": None,
        "logs_table_name": None, "traces_table_name": None, "metrics_table_name": None, "metrics_tables": None,
        "ttl": None, "table_engine": {"name", "params"}, "cluster_name": None, "create_schema": None,
        "async_insert": None, "timeout": None, "sending_queue": _QUEUE, "retry_on_failure": _RETRY,
    },
    "exporters/loadbalancing": {"routing_key": None, "protocol": {"otlp"}, "resolver": {"static", "dns", "k8s",
                                                                                        "aws_cloud_map"},
                                "timeout": None, "sending_queue": _QUEUE, "retry_on_failure": _RETRY},
    "extensions/health_check": {"endpoint": None, "path": None, "check_collector_pipeline": None},
    "extensions/file_storage": {"directory": None, "timeout": None, "compaction": None, "create_directory": None},
    # processor/transformprocessor/config.go; extension/bearertokenauthextension/config.go
    "processors/transform": {"error_mode": None, "trace_statements": None, "metric_statements": None,
                             "log_statements": None, "flatten_data": None},
    "extensions/bearertokenauth": {"scheme": None, "token": None, "filename": None, "tokens": None, "header": None},
}
# Top-level sections of a Collector configuration (service/config.go and otelcol/config.go).
TOP_LEVEL = {"receivers", "processors", "exporters", "extensions", "connectors", "service"}
CONTENT_PROCESSOR = "transform/drop_content"
AUTH_EXTENSION = "bearertokenauth"
# OTTL contexts of the transform processor for traces. Span links have none, so link attributes cannot be
# filtered in the Collector (our receiver drops them there too): see the rendered comment.
CONTENT_CONTEXTS = ("resource", "span", "spanevent")


def load(name: str = "collector") -> dict:
    return yaml.safe_load(FILES[name].read_text())


def environment(config: Config) -> dict[str, str]:
    """Values for the ``${env:...}`` placeholders, from infersight.yaml."""
    dsn = dsn_mod.parse(config.clickhouse.dsn, must_exist=False)  # validated with the config already
    if dsn.is_http:
        endpoint, database = dsn.base_url, dsn.database
    else:  # chdb:// is in-process: a Collector cannot reach it, so the exporter gets a server placeholder
        endpoint, database = "tcp://127.0.0.1:9000", "default"
    return {
        "OTLP_GRPC_ENDPOINT": config.listeners.otlp_grpc,
        "OTLP_HTTP_ENDPOINT": config.listeners.otlp_http,
        "CLICKHOUSE_ENDPOINT": endpoint,
        "CLICKHOUSE_DATABASE": database,
        "CLICKHOUSE_USERNAME": exporter_user(dsn),
        "CLICKHOUSE_PASSWORD": _password_source(dsn),  # a secret: never written into the config itself
        "SLOW_TRACE_MS": str(int(config.slo.ttft_seconds * 10_000)),
        "HEALTH_CHECK_ENDPOINT": "127.0.0.1:13133",
        "QUEUE_DIRECTORY": "/var/lib/otelcol/queue",
        "TIER2_HOSTNAME": "otelcol-tier2",
    }


def exporter_user(dsn: dsn_mod.Dsn) -> str:
    """The DSN's user, else the writer: ``infersight up``'s store has no usable ``default`` user (DESIGN 11)."""
    from infersight.pipelines import clickhouse_users

    return dsn.user or clickhouse_users.USERS[clickhouse_users.WRITER]


def _plain_password_file(dsn: dsn_mod.Dsn) -> str | None:
    """The DSN's password_file when it holds the password alone (not our two-role credentials file)."""
    if not dsn.password_file:
        return None
    try:
        text = Path(dsn.password_file).expanduser().read_text()
    except OSError:
        return dsn.password_file  # not on this host: the Collector's host has it (as the DSN says)
    return None if text.lstrip().startswith("{") else dsn.password_file


def _password_source(dsn: dsn_mod.Dsn) -> str:
    """``${file:PATH}`` for a plain password file (the Collector's file provider reads it), else
    ``${env:CLICKHOUSE_PASSWORD}``, for the Collector's environment."""
    plain = _plain_password_file(dsn)
    return f"${{file:{Path(plain).expanduser()}}}" if plain else "${env:CLICKHOUSE_PASSWORD}"


def _password_note(config: Config, dsn: dsn_mod.Dsn) -> str:
    from infersight.pipelines import clickhouse_users

    user = exporter_user(dsn)
    if _plain_password_file(dsn):
        return (f"# clickhouse exporter: user {user}, password read from {dsn.password_file} by the Collector\n"
                "#   (its file provider; the file must exist on the Collector's host).")
    role = next((name for name, known in clickhouse_users.USERS.items() if known == user), None)
    where = dsn.password_file or str(clickhouse_users.credentials_path(config.clickhouse.data_dir))
    if role:
        hint = (f"its password, the \"{role}\" entry of {where}, e.g.\n"
                f"#   export CLICKHOUSE_PASSWORD=\"$(jq -r .{role}.password {where})\"")
    else:
        hint = "its password."
    return (f"# clickhouse exporter: user {user}. Set CLICKHOUSE_PASSWORD in the Collector's environment to\n"
            f"#   {hint}")


def render(config: Config, name: str = "collector") -> str:
    """The shipped file with its placeholders filled from infersight.yaml, plus what the config asks for.

    Unless ``pipeline.store_content`` is true, a ``transform`` processor drops the content keys of
    :mod:`infersight.pipelines.content_filter` first in every traces pipeline; with
    ``pipeline.auth_token_file`` the OTLP receivers require that bearer token (``bearertokenauth``, which
    the load balancer also sends on to the collectors behind it).
    """
    values = environment(config)
    template = FILES[name].read_text()
    document = yaml.safe_load(ENV.sub(lambda m: values[m.group(1)], template))
    notes = []
    if "clickhouse" in (document.get("exporters") or {}):
        from infersight.pipelines.schema.ddl import Tables

        document["exporters"]["clickhouse"]["traces_table_name"] = Tables.from_config(config).traces
        notes.append(_password_note(config, dsn_mod.parse(config.clickhouse.dsn, must_exist=False)))
    if not config.pipeline.store_content:
        add_content_filter(document)
        notes.append(f"# {CONTENT_PROCESSOR}: prompt and completion attributes dropped (pipeline.store_content is "
                     "false),\n#   case-insensitively, in resource, span and span event attributes. OTTL has no span "
                     "link context:\n#   link attributes pass the Collector as sent (`infersight receive` drops them).")
    if config.pipeline.auth_token_file:
        add_bearer_token(document, config.pipeline.auth_token_file)
        notes.append(f"# {AUTH_EXTENSION}: the OTLP receivers require the bearer token in "
                     f"{config.pipeline.auth_token_file}\n#   (pipeline.auth_token_file; the file must exist on "
                     "the Collector's host).")
    header = "".join(line + "\n" for line in template.splitlines() if line.startswith("#") or not line.strip())
    header = header.split("\n\n")[0] + "\n"
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=200)
    return header + "#\n" + "\n".join(notes) + ("\n" if notes else "") + "\n" + body


def add_content_filter(document: dict) -> None:
    statements = []
    for context in CONTENT_CONTEXTS:
        pattern = content_filter.pattern(event=context == "spanevent")
        statements.append({"context": context, "statements": [f'delete_matching_keys(attributes, "{pattern}")']})
    processors = document.setdefault("processors", {}) or {}
    document["processors"] = {CONTENT_PROCESSOR: {"error_mode": "ignore", "trace_statements": statements},
                              **processors}
    for spec in (document.get("service", {}).get("pipelines") or {}).values():
        chain = spec.setdefault("processors", [])
        # after memory_limiter (which must stay first), before anything that keeps or exports spans
        at = 1 if chain[:1] == ["memory_limiter"] else 0
        chain.insert(at, CONTENT_PROCESSOR)


def add_bearer_token(document: dict, token_file: str) -> None:
    extensions = document.setdefault("extensions", {}) or {}
    document["extensions"] = {AUTH_EXTENSION: {"filename": token_file}, **extensions}
    service = document.setdefault("service", {})
    service["extensions"] = [AUTH_EXTENSION, *service.get("extensions", [])]
    for protocol in (document["receivers"]["otlp"].get("protocols") or {}).values():
        protocol["auth"] = {"authenticator": AUTH_EXTENSION}
    balancer = (document.get("exporters") or {}).get("loadbalancing")
    if balancer:  # tier 2 requires the token too: the load balancer sends it on
        balancer["protocol"]["otlp"]["auth"] = {"authenticator": AUTH_EXTENSION}


def check(document: dict, traces_table: str | None = None) -> list[str]:
    """Problems found in a Collector configuration (empty when it is sound); ``traces_table`` is the
    trace table our views read (clickhouse.tables.traces; the schema's name when None)."""
    problems: list[str] = []
    if not isinstance(document, dict):
        return ["not an OpenTelemetry Collector config: the top level must be a mapping"]
    unknown = sorted(set(document) - TOP_LEVEL)
    missing = [k for k in ("receivers", "exporters", "service") if k not in document]
    if unknown or missing:
        what = f"unknown top-level keys {', '.join(unknown)}" if unknown else f"no {', '.join(missing)} section"
        hint = " (this looks like an infersight.yaml)" if set(unknown) & {"clickhouse", "pipeline", "slo",
                                                                            "listeners", "cluster"} else ""
        return [f"not an OpenTelemetry Collector config: {what}{hint}; expected receivers, processors, "
                "exporters, extensions and service"]
    if not (document.get("service") or {}).get("pipelines"):
        problems.append("service.pipelines: no pipeline defined")
    defined: dict[str, set[str]] = {}
    for section in ("receivers", "processors", "exporters", "extensions"):
        for component, options in (document.get(section) or {}).items():
            defined.setdefault(section, set()).add(component)
            kind = component.split("/")[0]
            known = KNOWN_OPTIONS.get(f"{section}/{kind}")
            if known is None:
                problems.append(f"{section}.{component}: not a component this check knows; add its documented options")
                continue
            for option, value in (options or {}).items():
                if option not in known:
                    problems.append(f"{section}.{component}.{option}: not a documented option")
                elif known[option] is not None and isinstance(value, dict):
                    for nested in value:
                        if nested not in known[option]:
                            problems.append(f"{section}.{component}.{option}.{nested}: not a documented option")
    service = document.get("service") or {}
    for extension in service.get("extensions", []):
        if extension not in defined.get("extensions", set()):
            problems.append(f"service.extensions: {extension} is not defined")
    for pipeline, spec in (service.get("pipelines") or {}).items():
        for section in ("receivers", "processors", "exporters"):
            for component in spec.get(section, []):
                if component not in defined.get(section, set()):
                    problems.append(f"service.pipelines.{pipeline}.{section}: {component} is not defined")
        processors = spec.get("processors", [])
        if "tail_sampling" in processors and "batch" in processors \
                and processors.index("batch") < processors.index("tail_sampling"):
            problems.append(f"service.pipelines.{pipeline}: batch must come after tail_sampling")
    problems += _check_clickhouse(document.get("exporters", {}).get("clickhouse"), traces_table)
    problems += _check_sampling(document.get("processors", {}).get("tail_sampling"))
    return problems


def _check_clickhouse(exporter: dict | None, traces_table: str | None) -> list[str]:
    if exporter is None:
        return []
    from infersight.pipelines.schema import ddl

    traces_table = traces_table or ddl.DEFAULT_TABLES.traces
    problems = []
    if exporter.get("create_schema", True) is not False:
        problems.append("exporters.clickhouse.create_schema must be false: `infersight db migrate` owns the DDL")
    # The exporter's own default is the schema's default name.
    if exporter.get("traces_table_name", ddl.DEFAULT_TABLES.traces) != traces_table:
        problems.append(f"exporters.clickhouse.traces_table_name must be {traces_table} (the table our views read; "
                        "clickhouse.tables.traces)")
    if "ttl" in exporter:
        problems.append("exporters.clickhouse.ttl: retention is set by clickhouse.retention and the migrations")
    return problems


def _check_sampling(processor: dict | None) -> list[str]:
    if processor is None:
        return []
    problems, types = [], set()
    for policy in processor.get("policies", []):
        kind = policy.get("type")
        types.add(kind)
        if kind not in _POLICY_TYPES:
            problems.append(f"tail_sampling policy {policy.get('name')!r}: unknown type {kind!r}")
        elif kind not in ("always_sample",) and kind not in policy:
            problems.append(f"tail_sampling policy {policy.get('name')!r}: needs a {kind!r} block")
        if kind == "string_attribute":
            key = policy.get("string_attribute", {}).get("key")
            if key not in (attr.REQUEST_OUTCOME, attr.SAMPLING_REASON, attr.ERROR_TYPE):
                problems.append(f"tail_sampling policy {policy.get('name')!r}: {key!r} is not an attribute we write")
    for needed in ("status_code", "latency"):
        if needed not in types:
            problems.append(f"tail_sampling must keep failed and slow traces: no {needed!r} policy")
    return problems
