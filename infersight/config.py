"""infersight.yaml: the one configuration file, validated with pydantic.

Every section has defaults, so an empty file (or none) is a valid single-machine setup. A bad
file raises :class:`ConfigError` whose message names the key, the value found and what is
expected; the CLI prints it without a traceback.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infersight.capacity import GPU_PRESETS, GPUSpec, ModelSpec
from infersight.listen import parse_listen

DEFAULT_PATHS = ("infersight.yaml", "infersight.yml")
ENV_VAR = "INFERSIGHT_CONFIG"


def _http_url(value: str | None, error: str) -> str | None:
    """``value`` when it is None or an http(s) URL; else ``error`` (which says what to write instead)."""
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError(error)
    return value


class ConfigError(Exception):
    """A configuration problem, worded for the person who edits the file."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _listen_address(value: str) -> str:
    parse_listen(value)
    return value


class SLO(Section):
    ttft_seconds: float = Field(1.0, gt=0, description="TTFT threshold a request must meet")
    ttft_objective: float = Field(0.99, gt=0, lt=1, description="share of requests meeting ttft_seconds")
    ttft_p95_seconds: float = Field(1.0, gt=0, description="TTFT p95 target for dashboards and scale-out")
    tpot_p95_seconds: float = Field(0.1, gt=0, description="time per output token p95 target")

    @field_validator("ttft_seconds")
    @classmethod
    def _on_a_bucket(cls, value: float) -> float:
        # Burn-rate alerts count "good" requests from the histogram bucket at exactly this bound.
        from infersight.signals.request import TTFT

        if value not in TTFT.buckets:
            bounds = ", ".join(f"{b:g}" for b in TTFT.buckets)
            raise ValueError(f"must be a bucket boundary of {TTFT.name} so burn-rate alerts can count "
                             f"requests under it; pick one of {bounds}")
        return value


class Thresholds(Section):
    gateway_queue_depth: float = Field(50, gt=0, description="gateway queue depth drawn as a line on the fleet "
                                                            "dashboard and the incident report")
    queue_wait_slo_share: float = Field(
        0.1, gt=0, lt=1, description="requests' mean wait in the queues (gateway and engines) over 30 minutes, as a "
                                      "share of the p95 TTFT target, that asks for scale-out")
    ttft_slo_share_rising: float = Field(0.7, gt=0, le=1, description="p95 TTFT over this share of the SLO and rising")
    forecast_hours: float = Field(2, gt=0, le=24)
    forecast_min_demand_share: float = Field(
        0.9, gt=0, lt=1, description="the demand forecast pages only once demand is over this share of capacity "
                                     "(a normal ramp peaking under it stays quiet)")
    prefill_capacity_share: float = Field(
        0.6, gt=0, le=1, description="share of the capacity model's prefill compute a pool can use with p95 TTFT still "
                                     "within its target (first tokens queue for the prefill long before 100%): "
                                     "the demand forecast's prefill capacity of an instance that also decodes "
                                     "(its decoding waits out every prefill chunk)")
    prefill_only_capacity_share: float = Field(
        0.75, gt=0, le=1, description="the same for a disaggregated prefill instance, which decodes nothing: only "
                                      "the prompts' own queue limits it, so it runs fuller")
    instance_p99_ttft_seconds: float = Field(
        5.0, gt=0, description="floor: an instance's own p99 TTFT (inside the engine) must be over this to "
                               "half-open its breaker")
    instance_p99_peer_factor: float = Field(
        2.0, gt=1, description="... and over this many times the median instance p99 of its model and pool")
    retry_ratio: float = Field(0.2, gt=0, description="retries per request, fleet-wide, for a retry storm")
    ejection_share: float = Field(0.3, gt=0, le=1, description="share of instances ejected within 5m")
    flaps_per_15m: float = Field(4, gt=0)
    rejection_ratio: float = Field(0.05, gt=0, le=1)
    bandwidth_saturation: float = Field(0.9, gt=0, le=1)
    compute_low: float = Field(0.5, gt=0, le=1)
    kv_usage_near_full: float = Field(0.95, gt=0, le=1)
    prefix_hit_collapse: float = Field(0.5, gt=0, lt=1, description="hit rate below this share of its 1d baseline")
    gpu_temperature_celsius: float = Field(85, gt=0)
    cold_start_minutes: float = Field(15, gt=0, description="an instance younger than this is in its cold start")
    cold_cache_hit_ratio: float = Field(0.1, gt=0, lt=1, description="prefix-cache hit ratio that means cache-cold")
    spans_rejected_ratio: float = Field(0.01, gt=0, lt=1, description="share of received spans the pipeline refuses")
    exporter_jobs: str = Field("infersight.*", min_length=1,
                               description="regex of the Prometheus job names that scrape infersight exporters")

    @field_validator("exporter_jobs")
    @classmethod
    def _a_regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc}); e.g. infersight.*") from None
        if '"' in value or "\\" in value:
            raise ValueError("quotes and backslashes are not allowed here (it goes into a PromQL string)")
        return value


class Capacity(Section):
    model: ModelSpec = ModelSpec(name="gemma-27b-int4", params=27e9, layers=64, kv_heads=8, head_dim=128,
                                 weight_bits=4, kv_bytes=2)
    gpu: str = "H100-SXM"
    gpu_overrides: dict[str, Any] = Field(default_factory=dict, description="fields of the GPU preset to replace")
    context_tokens: int = Field(2048, gt=0)
    prefill_utilization: float = Field(0.6, gt=0, le=1)
    target_tokens_per_s: float = Field(20.0, gt=0)
    memory_utilization: float = Field(1.0, gt=0, le=1, description="share of GPU memory the engine may use")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value not in GPU_PRESETS:
            raise ValueError(f"unknown GPU preset; expected one of {', '.join(GPU_PRESETS)}")
        return value

    @model_validator(mode="after")
    def _overrides_apply(self) -> Capacity:
        self.gpu_spec()  # raise now, not at first use
        return self

    def gpu_spec(self) -> GPUSpec:
        merged = GPU_PRESETS[self.gpu].model_dump() | self.gpu_overrides
        return GPUSpec.model_validate(merged)


class Listeners(Section):
    gpu_exporter: str = "127.0.0.1:9835"
    engine_exporter: str = "127.0.0.1:9836"
    gateway_exporter: str = "127.0.0.1:9837"
    otlp_grpc: str = "127.0.0.1:4317"
    otlp_http: str = "127.0.0.1:4318"
    proxy: str = "127.0.0.1:8081"

    _check = field_validator("*")(classmethod(lambda cls, v: _listen_address(v)))


class Retention(Section):
    traces_days: int = Field(7, gt=0)
    tokens_days: int = Field(3, gt=0)
    rollups_days: int = Field(90, gt=0)


TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class TableNames(Section):
    """Table names other than the schema's own (``pipelines/schema/ddl.py`` defines those), like the
    Collector exporter's ``traces_table_name``; unset means the schema's name."""

    traces: str | None = Field(None, description="the OTel trace table; its trace id lookup is <traces>_trace_id_ts")
    token_timelines: str | None = Field(None, description="kept token timelines, one row per request span")
    token_events: str | None = Field(None, description="the view with one row per token")
    requests_1m: str | None = Field(None, description="the per-minute request rollup")
    migrations: str | None = Field(None, description="applied schema versions")

    @field_validator("*")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        # Plain names only: they appear in DDL, in Grafana's SQL and in the Collector's config.
        if value is not None and not TABLE_NAME.fullmatch(value):
            raise ValueError("letters, digits and _ only, not starting with a digit, e.g. otel_traces")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> TableNames:
        if any(self.model_dump().values()):
            from infersight.pipelines.schema.ddl import Tables  # the defaults live in the schema module

            Tables.from_names(self)  # raises when two tables would get one name
        return self


class ClickHouse(Section):
    dsn: str = Field("http://127.0.0.1:8123/default",
                     description="http(s)://[user@]host:port/db[?password_file=PATH] or chdb://path")
    data_dir: str = ".infersight/clickhouse"
    retention: Retention = Retention()
    tables: TableNames = Field(default_factory=TableNames)

    @field_validator("dsn")
    @classmethod
    def _valid_dsn(cls, value: str) -> str:
        from infersight.dsn import DsnError, parse

        try:
            parse(value, must_exist=False)  # a chdb:// folder is checked where it is opened
        except DsnError as exc:
            raise ValueError(str(exc)) from None
        return value


class Prometheus(Section):
    url: str | None = "http://127.0.0.1:9090"
    job_prefix: str = Field("infersight-", description="`prometheus render` job names: prefix + component "
                                                        "(gpu, engine, ...); must match thresholds.exporter_jobs")

    @field_validator("job_prefix")
    @classmethod
    def _label_value(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]*", value):
            raise ValueError("letters, digits and _ . : - only, e.g. infersight-")
        return value


class EngineTarget(Section):
    url: str
    engine: Literal["auto", "vllm", "sglang", "tgi", "triton", "trtllm", "llamacpp"] = "auto"
    instance: str | None = Field(None, description="the `instance` label: the engine endpoint HOST:PORT the "
                                                   "gateway routes to; default the URL's host:port")
    model: str | None = None
    pool: str | None = None
    node: str | None = None
    gpu: str | None = None
    role: Literal["prefill", "decode", "mixed"] | None = Field(
        None, description="the instance's part in prefill/decode disaggregation; default: what the engine "
                          "says (SGLang's engine_type), else mixed")


class Engines(Section):
    targets: list[EngineTarget] = Field(default_factory=list)
    file_sd: str | None = None
    timeout_seconds: float = Field(2.0, gt=0)
    max_bytes: int = Field(8 * 1024 * 1024, gt=0)


class GatewayTarget(Section):
    url: str
    kind: Literal["auto", "epp", "vllm-router", "litellm", "otel-genai"] = "auto"
    name: str | None = None
    pool: str | None = None
    strategy: str | None = None
    model: str | None = None


class Gateways(Section):
    targets: list[GatewayTarget] = Field(default_factory=list)
    timeout_seconds: float = Field(2.0, gt=0)
    max_bytes: int = Field(8 * 1024 * 1024, gt=0)


class SimGPUs(Section):
    count: int = Field(8, gt=0, le=4096)
    type: str = "H100-SXM"
    compute: float = Field(0.0, ge=0, le=1, description="starting compute demand of every simulated GPU, 0..1")
    bandwidth: float = Field(0.0, ge=0, le=1, description="starting DRAM bandwidth demand, 0..1")

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in GPU_PRESETS:
            raise ValueError(f"unknown GPU preset; expected one of {', '.join(GPU_PRESETS)}")
        return value


class DcgmSource(Section):
    url: str = Field(description="a dcgm-exporter /metrics URL, e.g. http://10.0.0.5:9400/metrics")
    node: str | None = Field(None, description="the node label; default: the exporter's hostname label")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value, "expected a URL like http://10.0.0.5:9400/metrics")


class Dcgm(Section):
    sources: list[DcgmSource] = Field(default_factory=list, description="dcgm-exporters to read (backend dcgm)")
    timeout_seconds: float = Field(2.0, gt=0, description="per-source scrape deadline")
    max_bytes: int = Field(8 * 1024 * 1024, gt=0, description="per-source body limit")


class GPUs(Section):
    backend: Literal["nvml", "sim", "dcgm"] = "nvml"
    node: str | None = Field(None, description="the node label; defaults to the host name")
    sample_interval_seconds: float = Field(1.0, gt=0, le=60, description="background sampling and GPM window")
    stale_after_seconds: float | None = Field(None, gt=0, description="older samples read as down; "
                                                                      "default 5 sampling intervals")
    otlp_endpoint: str | None = Field(None, description="push metrics over OTLP too, e.g. http://127.0.0.1:4318")
    otlp_protocol: Literal["http", "grpc"] = "http"
    otlp_interval_seconds: float = Field(10.0, gt=0)
    sim: SimGPUs = SimGPUs()
    dcgm: Dcgm = Dcgm()

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_url(cls, value: str | None) -> str | None:
        return _http_url(value, "expected a URL starting with http:// or https://, e.g. http://127.0.0.1:4318")


class Pipeline(Section):
    # Each insert costs ClickHouse ~70 ms of query analysis whatever its size, so batches are large
    # (benchmarks/pipeline_e2e.py: 100k-span batches ~1.5x the throughput of 50k ones).
    batch_rows: int = Field(100_000, gt=0, le=200_000, description="spans per insert")
    # Bytes bound the token timelines per insert (ClickHouse's memory). Since timelines are stored as their
    # text once per request (schema 5), 48 MiB batches of timeline spans (~98k spans) peak at 0.8-0.9 GiB
    # ClickHouse RSS against 0.7 GiB at 24 MiB and halve the fixed cost per insert per span: 27-34
    # CPU-us per stored span against 41-42 (benchmarks/pipeline_e2e.py --batch-bytes, issue 18).
    batch_bytes: int = Field(48 * 1024 * 1024, gt=0, description="OTLP protobuf bytes per insert")
    batch_seconds: float = Field(1.0, gt=0)
    insert_attempts: int = Field(3, gt=0, description="tries per batch before it goes to the spool")
    retry_initial_seconds: float = Field(0.2, gt=0, description="first retry backoff (doubles, with jitter)")
    retry_max_seconds: float = Field(5.0, gt=0, description="longest backoff between retries or replays")
    insert_threads: int = Field(2, gt=0, le=16, description="concurrent ClickHouse inserts")
    insert_parallelism: int = Field(2, gt=0, le=16,
                                    description="threads ClickHouse uses per insert after parsing (max_insert_threads)")
    queue_max_spans: int = Field(1_000_000, gt=0, description="spans held in memory; beyond: 429")
    # The OTel Collector's exporter times an export out after 5 s and sends it again: a queue that takes
    # longer to drain would have data stored twice. So the queue is bounded by drain time at the writer's
    # measured rate, not only by a count: on 2 cores (~75k spans/s) 4 s hold ~300k spans, the count that
    # was the bound before, and a slow ClickHouse shortens the queue instead of the clients' patience.
    # 4 s against the former fixed 300k, 2 x 2 inserts: 1.38-1.62x against 1.27-1.48x one insert, with
    # 7-63 against 76-86 429s; at 3 s the bound bounced requests a busy writer would have taken in time
    # (benchmarks/pipeline_e2e.py, issue 18).
    queue_max_seconds: float = Field(4.0, gt=0, description="longest the queued spans may take to drain "
                                                            "at the measured insert rate; beyond: 429")
    queue_max_bytes: int = Field(256 * 1024 * 1024, gt=0,
                                 description="request bytes queued in memory, and apart from them the bytes of "
                                             "OTLP/HTTP bodies still arriving; beyond either: 429")
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    max_attribute_length: int = Field(8192, gt=0)
    spool_dir: str = ".infersight/spool"
    spool_max_bytes: int = Field(1024**3, gt=0)
    auth_token_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    store_content: bool = Field(False, description="keep prompt/completion text attributes")


class Tracing(Section):
    head_ratio: float = Field(1.0, ge=0, le=1, description="share of request spans recorded (head sampling)")
    random_timeline_share: float = Field(0.01, ge=0, le=1)
    slow_quantile: float = Field(0.99, gt=0, lt=1, description="keep timelines above this rolling quantile")
    slow_min_samples: int = Field(100, ge=1, description="requests per model before 'slow' is judged")
    otlp_endpoint: str | None = None
    otlp_protocol: Literal["grpc", "http/protobuf"] | None = None
    max_queue_size: int | None = Field(None, gt=0, description="span queue; default 65536 or OTEL_BSP_MAX_QUEUE_SIZE")
    max_export_batch_size: int | None = Field(None, gt=0)
    schedule_delay_ms: float | None = Field(None, gt=0)
    max_span_events: int | None = Field(None, ge=0, description="default 16384 or OTEL_SPAN_EVENT_COUNT_LIMIT")
    metrics_otlp_endpoint: str | None = Field(None, description="also push the request metrics over OTLP/HTTP, "
                                                                "under the GenAI metric names")
    metrics_interval_seconds: float = Field(10.0, gt=0)

    @field_validator("metrics_otlp_endpoint")
    @classmethod
    def _metrics_url(cls, value: str | None) -> str | None:
        return _http_url(value, "expected an OTLP/HTTP URL such as http://127.0.0.1:4318")

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        return _http_url(value, "expected a URL such as http://127.0.0.1:4317 (gRPC) or http://127.0.0.1:4318 (HTTP)")


class Alertmanager(Section):
    pagerduty_routing_key_file: str | None = None
    slack_api_url_file: str | None = None
    slack_channel: str = "#llm-oncall"
    ticket_webhook_url: str = "http://127.0.0.1:9098/tickets"
    autoscaler_webhook_url: str = "http://127.0.0.1:9099/scale"
    gateway_webhook_url: str = "http://127.0.0.1:9097/breaker"
    runbook_base_url: str | None = Field(None, description="where alerts link their runbooks (URL + /ALERT.md); "
                                                         "default: alerts/runbooks/ of the repository")

    @field_validator("runbook_base_url")
    @classmethod
    def _runbook_url(cls, value: str | None) -> str | None:
        return _http_url(value, "expected an http(s) URL the on-call can open, e.g. "
                                "https://github.com/your-org/infersight/blob/main/alerts/runbooks")

    def runbooks(self) -> str:
        """The runbook base URL: the configured one, else the repository's alerts/runbooks/ folder."""
        if self.runbook_base_url:
            return self.runbook_base_url.rstrip("/")
        from infersight import repository_url

        repository = repository_url()
        if repository is None:
            raise ConfigError("alertmanager.runbook_base_url is not set and the package metadata names no "
                              "repository; set it to where the runbooks are published")
        return f"{repository}/blob/main/alerts/runbooks"


class Grafana(Section):
    url: str | None = Field(None, description="Grafana's base URL, e.g. https://grafana.example.com; the incident "
                                              "report then links trace ids to Grafana's trace view")
    clickhouse_datasource_uid: str | None = Field(None, min_length=1,
                                                  description="uid of the ClickHouse datasource the links open; "
                                                              "default: the one `dashboards build` provisions")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        value = _http_url(value, "expected a URL starting with http:// or https://, e.g. http://127.0.0.1:3000")
        return value.rstrip("/") if value else value


class Config(Section):
    cluster: str = "local"
    slo: SLO = SLO()
    thresholds: Thresholds = Thresholds()
    capacity: Capacity = Capacity()
    listeners: Listeners = Listeners()
    clickhouse: ClickHouse = ClickHouse()
    prometheus: Prometheus = Prometheus()
    engines: Engines = Engines()
    gateways: Gateways = Gateways()
    gpus: GPUs = GPUs()
    pipeline: Pipeline = Pipeline()
    tracing: Tracing = Tracing()
    alertmanager: Alertmanager = Alertmanager()
    grafana: Grafana = Grafana()


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(p) for p in error["loc"]) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key (check the spelling against the example infersight.yaml)"
    if kind == "missing":
        return f"{key}: required key is missing"
    value = error.get("input")
    expected = error["msg"]
    if expected.startswith("Value error, "):
        expected = expected[len("Value error, "):]
    return f"{key}: got {value!r}; {expected[0].lower() + expected[1:]}"


def parse_config(data: Any, source: str = "infersight.yaml") -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(e) for e in exc.errors()]
        raise ConfigError(f"{source}: invalid configuration\n  " + "\n  ".join(lines)) from None


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load the config from ``path``, $INFERSIGHT_CONFIG, ./infersight.yaml, or use defaults."""
    if path is None:
        path = os.environ.get(ENV_VAR)
    if path is None:
        path = next((p for p in DEFAULT_PATHS if Path(p).is_file()), None)
        if path is None:
            return Config()
    file = Path(path)
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such config file (pass --config PATH or create infersight.yaml)") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{file}: not valid YAML{at}: {problem}") from None
    return parse_config(data, str(file))
