"""The ClickHouse schema as SQL text: traces, token events and the per-minute rollup.

One renderer serves a single server (MergeTree engines) and a cluster (``ON CLUSTER``, Replicated
engines, a ``*_local`` table per shard behind a Distributed table of the public name, so the
Collector, the receiver and the queries use the same table names everywhere).

``otel_traces`` is column-for-column the OpenTelemetry Collector contrib ClickHouse exporter's table
(its inserts name their columns, so our extra columns do not disturb it). Our extra columns are all
``MATERIALIZED`` from ``SpanAttributes``: computed once at insert, whichever writer sent the row,
so the hot post-incident queries read a small typed column instead of parsing the map
(p95-per-minute: ~94 ms from the map vs ~15 ms from a Float64 column at 1M rows, issue 8).
Attribute keys come from :mod:`infersight.attributes`; nothing here retypes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from infersight import attributes as attr
from infersight.attributes import Outcome
from infersight.config import Config, Retention, TableNames


@dataclass(frozen=True)
class Tables:
    """The schema's table names: defined here, overridden by ``clickhouse.tables`` in the config.

    As the Collector exporter's ``traces_table_name``: the trace id lookup is named after the trace
    table (``<traces>_trace_id_ts``, as the exporter names it), and each materialized view after the
    table it fills (``_mv``). DDL, migrations, the writer, the queries, the report, the demo and the
    dashboards all read the names from here.
    """

    traces: str = "otel_traces"
    token_timelines: str = "llm_token_timelines"  # one row per kept timeline (its JSON text), ordered by TraceId
    token_events: str = "llm_token_events"  # one row per token: a view that expands token_timelines at read time
    requests_1m: str = "llm_requests_1m"
    migrations: str = "infersight_schema_migrations"

    def __post_init__(self) -> None:
        derived = [self.trace_id_ts, self.trace_intake, self.token_events_v1]
        names = [*derived, *(getattr(self, f.name) for f in fields(self))]
        if len(names) != len(set(names)):
            raise ValueError(f"clickhouse.tables: two tables would be named alike ({', '.join(names)})")

    @property
    def trace_id_ts(self) -> str:
        return f"{self.traces}_trace_id_ts"

    @staticmethod
    def view(table: str) -> str:
        """The materialized view that fills ``table`` (the intake's view into the trace table, for one)."""
        return f"{table}_mv"

    @property
    def timelines_from_intake(self) -> str:
        """The intake's view into ``token_timelines`` (beside ``view(token_timelines)``, on the trace table)."""
        return f"{self.token_timelines}_intake_mv"

    @property
    def trace_intake(self) -> str:
        """Where our receiver inserts (a Null table): its views fill ``traces`` and ``token_timelines``."""
        return f"{self.traces}_intake"

    @property
    def token_events_v1(self) -> str:
        """The per-token table of schema versions before 5, renamed on upgrade."""
        return f"{self.token_events}_v1"

    @property
    def deduplicated(self) -> tuple[str, ...]:
        """Every table an OTLP batch writes (directly or through views): inserts there deduplicate."""
        return (self.traces, self.trace_id_ts, self.token_timelines, self.requests_1m)

    @classmethod
    def from_names(cls, names: TableNames) -> Tables:
        return cls(**{key: value for key, value in names.model_dump().items() if value})

    @classmethod
    def from_config(cls, config: Config) -> Tables:
        return cls.from_names(config.clickhouse.tables)


DEFAULT_TABLES = Tables()
QUANTILES = (0.5, 0.95, 0.99)
# As the rollup's quantilesState writes them; a quantilesMerge over its states must name the same levels.
QUANTILE_LEVELS = ", ".join(str(q) for q in QUANTILES)

# The column list of the Collector exporter's INSERT into otel_traces (Nested columns flattened).
# Writers name exactly these; every other column is MATERIALIZED.
EXPORTER_INSERT_COLUMNS = (
    "Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind", "ServiceName",
    "ResourceAttributes", "ScopeName", "ScopeVersion", "SpanAttributes", "Duration", "StatusCode", "StatusMessage",
    "Events.Timestamp", "Events.Name", "Events.Attributes",
    "Links.TraceId", "Links.SpanId", "Links.TraceState", "Links.Attributes",
)


def literal(text: str) -> str:
    """A ClickHouse string literal (for the constant attribute keys rendered into DDL)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def identifier(name: str) -> str:
    """A quoted identifier; database and cluster names come from the user."""
    if not name or "\x00" in name:
        raise ValueError(f"invalid identifier {name!r}")
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def span_attr(key: str) -> str:
    return f"SpanAttributes[{literal(key)}]"


REQUEST_SPAN = f"mapContains(SpanAttributes, {literal(attr.REQUEST_OUTCOME)})"
TOKEN_OFFSETS = f"JSONExtract({span_attr(attr.TOKEN_OFFSETS_US)}, 'Array(UInt64)')"

def _number(key: str) -> str:
    return f"toFloat64OrNull({span_attr(key)})"


# The longest time a request can take that the schema believes: a year (token offsets are cut there too).
MAX_OFFSET_US = 365 * 86_400 * 1_000_000
MAX_MS = MAX_OFFSET_US // 1000


def bounded(expr: str, high: float | int = MAX_MS) -> str:
    """``expr`` if it lies within 0..``high``, else NULL (unknown), so that a client's "nan", "inf",
    "-5" or "1e308" cannot turn every percentile of its window into NaN or Infinity (schema version 9).
    NaN fails both comparisons, so it reads as unknown too."""
    return f"if({expr} >= 0 AND {expr} <= {high}, {expr}, NULL)"


def _count(*keys: str) -> str:
    """The first of ``keys`` that holds a count, else 0."""
    return "coalesce(" + "".join(f"toUInt32OrNull({span_attr(key)}), " for key in keys) + "0)"


def _ms(ours_ms: str, theirs_s: str) -> str:
    """Our milliseconds, else another writer's seconds (vLLM's ``gen_ai.latency.*`` floats) in milliseconds."""
    return f"coalesce({_number(ours_ms)}, {_number(theirs_s)} * 1000)"


# vLLM's span has no TPOT; its decode time over the tokens after the first is vLLM's own per-request
# TPOT (vllm/v1/metrics/stats.py: decode_time / (num_generation_tokens - 1)); undefined for one token.
_VLLM_COMPLETION = _count(attr.GEN_AI_USAGE_COMPLETION_TOKENS)
_VLLM_TPOT_MS = (f"if({_VLLM_COMPLETION} > 1, "
                 f"{_number(attr.GEN_AI_LATENCY_DECODE_S)} * 1000 / ({_VLLM_COMPLETION} - 1), NULL)")

# Hot attributes promoted to typed columns: (column, type, expression over SpanAttributes).
# Milliseconds stay Float64 as the instrumentation writes them; a missing value is NULL, so
# quantiles skip it instead of counting it as 0. Timing and token columns read our names first, then
# the names other writers use for the same fact (vLLM's own spans, the GenAI conventions' cache
# name), so a fleet that only turns on its engines' tracing gets them filled (schema version 6).
PROMOTED_COLUMNS = (
    ("Outcome", "LowCardinality(String)", span_attr(attr.REQUEST_OUTCOME)),
    ("Model", "LowCardinality(String)", span_attr(attr.GEN_AI_REQUEST_MODEL)),
    ("Instance", "LowCardinality(String)", span_attr(attr.INSTANCE)),
    ("Pool", "LowCardinality(String)", span_attr(attr.POOL)),
    ("Strategy", "LowCardinality(String)", span_attr(attr.ROUTING_STRATEGY)),
    ("TtftMs", "Nullable(Float64)", bounded(_ms(attr.TTFT_MS, attr.GEN_AI_LATENCY_TTFT_S))),
    ("TpotMs", "Nullable(Float64)", bounded(f"coalesce({_number(attr.TPOT_MS)}, {_VLLM_TPOT_MS})")),
    ("QueueMs", "Nullable(Float64)", bounded(_ms(attr.QUEUE_MS, attr.GEN_AI_LATENCY_QUEUE_S))),
    ("InputTokens", "UInt32", _count(attr.GEN_AI_USAGE_INPUT_TOKENS, attr.GEN_AI_USAGE_PROMPT_TOKENS)),
    ("OutputTokens", "UInt32", _count(attr.GEN_AI_USAGE_OUTPUT_TOKENS, attr.GEN_AI_USAGE_COMPLETION_TOKENS)),
    ("CachedInputTokens", "UInt32", _count(attr.CACHED_INPUT_TOKENS, attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)),
    ("RetryAttempt", "Nullable(UInt16)", f"toUInt16OrNull({span_attr(attr.RETRY_ATTEMPT)})"),
    # The longest inter-token gap: the instrumentation's summary when present, else computed from the
    # kept timeline, so rows written by the plain OTel Collector get it too.
    ("TokenGapMaxMs", "Nullable(Float64)", bounded(
        f"if(mapContains(SpanAttributes, {literal(attr.TOKEN_GAP_MAX_MS)}), "
        f"toFloat64OrNull({span_attr(attr.TOKEN_GAP_MAX_MS)}), "
        f"if(length({TOKEN_OFFSETS}) > 1, arrayMax(arrayDifference({TOKEN_OFFSETS})) / 1000, NULL))")),
    # When the longest gap started (from the span start): the summary, else the offset of the token before it.
    ("TokenStallOffsetMs", "Nullable(Float64)", bounded(
        f"if(mapContains(SpanAttributes, {literal(attr.TOKEN_STALL_OFFSET_MS)}), "
        f"toFloat64OrNull({span_attr(attr.TOKEN_STALL_OFFSET_MS)}), "
        f"if(length({TOKEN_OFFSETS}) > 1, {TOKEN_OFFSETS}[arrayFirstIndex(gap -> gap = arrayMax(arrayDifference("
        f"{TOKEN_OFFSETS})), arrayDifference({TOKEN_OFFSETS})) - 1] / 1000, NULL))")),
    ("IsRequest", "Bool", REQUEST_SPAN),
    # Routing details of gateway.route spans: promoted so that showing a trace never reads the whole
    # SpanAttributes map of its granule (token timelines make that map large).
    ("RoutingCandidates", "String", span_attr(attr.ROUTING_CANDIDATES)),
    ("PrefixCacheRatio", "Nullable(Float64)",
     bounded(f"toFloat64OrNull({span_attr(attr.ROUTING_PREFIX_CACHE_RATIO)})", 1)),
)


@dataclass(frozen=True)
class SchemaOptions:
    database: str = "default"
    cluster: str | None = None
    retention: Retention = field(default_factory=Retention)
    tables: Tables = DEFAULT_TABLES

    @classmethod
    def from_config(cls, config: Config, database: str, cluster: str | None = None) -> SchemaOptions:
        return cls(database=database, cluster=cluster, retention=config.clickhouse.retention,
                   tables=Tables.from_config(config))

    @property
    def on_cluster(self) -> str:
        return f" ON CLUSTER {identifier(self.cluster)}" if self.cluster else ""

    def table(self, name: str, local: bool = False) -> str:
        """Qualified name; on a cluster, ``local`` names the per-shard table behind the Distributed one."""
        suffix = "_local" if local and self.cluster else ""
        return f"{identifier(self.database)}.{identifier(name + suffix)}"

    def view_of(self, table: str) -> str:
        """The qualified materialized view that fills ``table`` (per shard on a cluster, like its table)."""
        return self.table(Tables.view(table), local=True)

    def engine(self, name: str, kind: str = "MergeTree") -> str:
        if not self.cluster:
            return f"{kind}()"
        path = literal(f"/clickhouse/tables/{{shard}}/{self.database}/{name}_local")
        return f"Replicated{kind}({path}, '{{replica}}')"

    def distributed(self, name: str, sharding_key: str) -> list[str]:
        """On a cluster, the public table that routes to each shard's ``*_local``; nothing on one server."""
        if not self.cluster:
            return []
        return [f"CREATE TABLE IF NOT EXISTS {self.table(name)}{self.on_cluster} AS {self.table(name, local=True)}\n"
                f"ENGINE = Distributed({literal(self.cluster)}, {literal(self.database)}, "
                f"{literal(name + '_local')}, {sharding_key})"]


# Inserts a plain MergeTree remembers for insert_deduplication_token: a retried or replayed batch is
# stored once. Replicated tables deduplicate by default; plain ones only with this window set.
DEDUP_WINDOW = 10_000


def deduplication_window(opts: SchemaOptions) -> list[str]:
    """Turn on insert deduplication for every table an OTLP batch writes (directly or through views)."""
    if opts.cluster:
        return []  # Replicated engines deduplicate already
    return [f"ALTER TABLE {opts.table(name)} MODIFY SETTING non_replicated_deduplication_window = {DEDUP_WINDOW}"
            for name in opts.tables.deduplicated]


# The promoted columns whose expressions schema version 6 changed (they read other writers' names too).
FALLBACK_COLUMNS = ("TtftMs", "TpotMs", "QueueMs", "InputTokens", "OutputTokens", "CachedInputTokens")


def fallback_columns(opts: SchemaOptions) -> list[str]:
    """Version 6: ``MODIFY COLUMN`` the timing and token columns to their current expressions.

    Only the expression changes, so ClickHouse rewrites no data and the statement is instant and
    idempotent. A materialized column is computed when a part is written: parts stored before keep
    the values they had (a vLLM span stored earlier keeps a NULL TTFT) until someone rewrites them with
    ``ALTER TABLE otel_traces MATERIALIZE COLUMN TtftMs`` (a mutation over every part: heavy, optional).
    On a cluster the shards' tables and the Distributed table get the same definition.
    """
    return _modify_columns(opts, FALLBACK_COLUMNS)


def _modify_columns(opts: SchemaOptions, names: tuple[str, ...]) -> list[str]:
    """``MODIFY COLUMN`` promoted columns to their current expressions, on the shards' tables and the
    Distributed table alike."""
    t = opts.tables
    definitions = {name: (kind, expr) for name, kind, expr in PROMOTED_COLUMNS}
    modify = ",\n".join(f"    MODIFY COLUMN {name} {definitions[name][0]} MATERIALIZED {definitions[name][1]}"
                         for name in names)
    tables = [opts.table(t.traces, local=True)] + ([opts.table(t.traces)] if opts.cluster else [])
    return [f"ALTER TABLE {table}{opts.on_cluster}\n{modify}" for table in tables]


# The promoted columns that schema version 9 bounds (``bounded``): timings and the cache ratio.
BOUNDED_COLUMNS = ("TtftMs", "TpotMs", "QueueMs", "TokenGapMaxMs", "TokenStallOffsetMs", "PrefixCacheRatio")


def bounded_columns(opts: SchemaOptions) -> list[str]:
    """Version 9: timings outside 0..a year (and a cache ratio outside 0..1) are stored as unknown.

    Before, one span with a TTFT of "inf" or "1e308" made the p95 and p99 of its whole window Infinity
    and the p50 NaN, in the per-minute rollup and in every query over the promoted columns. As in
    version 6 only the expressions change (instant, idempotent); parts written before keep their
    values until ``ALTER TABLE otel_traces MATERIALIZE COLUMN TtftMs`` rewrites them. The rollup's view
    gets the same bound by ``MODIFY QUERY``, atomically, so no insert meanwhile misses the rollup.
    """
    t = opts.tables
    return [*_modify_columns(opts, BOUNDED_COLUMNS),
            f"ALTER TABLE {opts.view_of(t.requests_1m)}{opts.on_cluster}\nMODIFY QUERY {requests_rollup_select(opts)}"]


# How many parts ClickHouse's merge selector lets build up before it merges them (schema version 10).
MERGE_SELECTOR_BASE = 10


def merge_selector(opts: SchemaOptions) -> list[str]:
    """Version 10: otel_traces and llm_token_timelines merge their parts in fewer generations.

    ClickHouse's merge selector (``merge_selector_base``, 5 by default) decides how many similar parts
    pile up before it merges them. Each generation rewrites every row, at about the CPU per span of the
    insert itself, and a partition of a day holds tens of thousands of inserts. A base of 10 takes about
    log(5) / log(10) = 0.7 of the generations (measured: 0.63-0.96x the merge CPU) for up to about
    twice the active parts (benchmarks/pipeline_profile.py --merge-life; figures in benchmarks/README.md).
    """
    return _big_tables_setting(opts, "merge_selector_base", MERGE_SELECTOR_BASE)


def _big_tables_setting(opts: SchemaOptions, setting: str, value: int) -> list[str]:
    """One table setting on the two tables that take every span and every timeline."""
    t = opts.tables
    return [f"ALTER TABLE {opts.table(name, local=True)}{opts.on_cluster} MODIFY SETTING {setting} = {value}"
            for name in (t.traces, t.token_timelines)]


# A part below this size is written Compact (all columns in one file) instead of Wide (a file per
# column and subcolumn); merges still write the big parts Wide (schema version 11).
WIDE_PART_MIN_BYTES = 128 * 1024 * 1024


def compact_inserts(opts: SchemaOptions) -> list[str]:
    """Version 11: an insert into otel_traces or llm_token_timelines is written as one Compact part.

    ClickHouse writes a part Wide above ``min_bytes_for_wide_part`` (10 MiB by default): one file (and
    its marks) per column and Map/Nested subcolumn, well over a hundred files for otel_traces. A batch of
    100k spans crosses that bound, and creating those files (inode creation in the kernel) was ~8% of
    ClickHouse's CPU during timeline inserts (perf). A Compact part is one data file; merges rewrite the
    parts anyway, and above this bound they write Wide parts, as the queries want them. Measured:
    0.82-0.90x the insert CPU per span, merges equal within spread, bytes per span unchanged
    (benchmarks/pipeline_profile.py --merges; figures in benchmarks/README.md).
    """
    return _big_tables_setting(opts, "min_bytes_for_wide_part", WIDE_PART_MIN_BYTES)


def create_database(opts: SchemaOptions) -> str:
    return f"CREATE DATABASE IF NOT EXISTS {identifier(opts.database)}{opts.on_cluster}"


def migrations_table(opts: SchemaOptions) -> str:
    # Replicated on a cluster, so every node agrees on what has been applied.
    t = opts.tables
    return (f"CREATE TABLE IF NOT EXISTS {opts.table(t.migrations)}{opts.on_cluster} (\n"
            "    Version UInt32,\n    Name String,\n    AppliedAt DateTime DEFAULT now()\n"
            f") ENGINE = {opts.engine(t.migrations, 'ReplacingMergeTree')}\nORDER BY Version")


# The Collector exporter's otel_traces columns, as it creates them (the trace table and the intake).
EXPORTER_COLUMNS = """    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
"""


def traces_table(opts: SchemaOptions) -> list[str]:
    """``otel_traces`` as the Collector's exporter creates it, plus promoted columns and skip indexes."""
    t = opts.tables
    days = opts.retention.traces_days
    promoted = "".join(f"    {name} {kind} MATERIALIZED {expr},\n" for name, kind, expr in PROMOTED_COLUMNS)
    return [f"""CREATE TABLE IF NOT EXISTS {opts.table(t.traces, local=True)}{opts.on_cluster} (
{EXPORTER_COLUMNS}{promoted}    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_timestamp Timestamp TYPE minmax GRANULARITY 1,
    INDEX idx_instance Instance TYPE set(256) GRANULARITY 4,
    INDEX idx_ttft TtftMs TYPE minmax GRANULARITY 1,
    INDEX idx_gap TokenGapMaxMs TYPE minmax GRANULARITY 1
) ENGINE = {opts.engine(t.traces)}
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
TTL toDateTime(Timestamp) + toIntervalDay({days})
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1"""] + opts.distributed(t.traces, "cityHash64(TraceId)")


def trace_id_ts(opts: SchemaOptions) -> list[str]:
    """The exporter's TraceId -> (Start, End) lookup that Grafana uses to find a trace's time range."""
    t = opts.tables
    days = opts.retention.traces_days
    return [f"""CREATE TABLE IF NOT EXISTS {opts.table(t.trace_id_ts, local=True)}{opts.on_cluster} (
    TraceId String CODEC(ZSTD(1)),
    Start DateTime CODEC(Delta, ZSTD(1)),
    End DateTime CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = {opts.engine(t.trace_id_ts)}
PARTITION BY toDate(Start)
ORDER BY (TraceId, Start)
TTL toDateTime(Start) + toIntervalDay({days})
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1""",
            *opts.distributed(t.trace_id_ts, "cityHash64(TraceId)"),
            f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {opts.view_of(t.trace_id_ts)}{opts.on_cluster}
TO {opts.table(t.trace_id_ts, local=True)}
AS SELECT
    TraceId,
    min(Timestamp) AS Start,
    max(Timestamp) AS End
FROM {opts.table(t.traces, local=True)}
WHERE TraceId != ''
GROUP BY TraceId"""]


def token_events(opts: SchemaOptions) -> list[str]:
    """Kept token timelines: one row per request span, and ``llm_token_events``, one row per token.

    Measured (benchmarks/pipeline_profile.py, every request span with a 256-token timeline): a view
    that exploded each timeline into one stored row per token cost ClickHouse ~4x the CPU per span of
    storing the timeline's text once per request, most of the insert. So ``llm_token_timelines``
    keeps the JSON text as ``SpanAttributes`` holds it (no parse at insert), ordered by TraceId with
    small granules so that one trace's timeline is a point read; ``llm_token_events`` is a plain view
    that parses and expands it when read, with the columns and values the per-token table had
    (``GapUs`` is the time since the previous token, 0 for the first). A malformed offsets attribute
    yields no rows, never an error.
    """
    t = opts.tables
    days = opts.retention.tokens_days
    dedup = "" if opts.cluster else f", non_replicated_deduplication_window = {DEDUP_WINDOW}"
    return [f"""CREATE TABLE IF NOT EXISTS {opts.table(t.token_timelines, local=True)}{opts.on_cluster} (
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    Model LowCardinality(String) CODEC(ZSTD(1)),
    Instance LowCardinality(String) CODEC(ZSTD(1)),
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    OffsetsUs String CODEC(ZSTD(1)),
    INDEX idx_timestamp Timestamp TYPE minmax GRANULARITY 1
) ENGINE = {opts.engine(t.token_timelines)}
PARTITION BY toDate(Timestamp)
ORDER BY (TraceId, SpanId)
TTL toDateTime(Timestamp) + toIntervalDay({days})
SETTINGS index_granularity = 256, ttl_only_drop_parts = 1{dedup}""",
            *opts.distributed(t.token_timelines, "cityHash64(TraceId)"),
            f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {opts.view_of(t.token_timelines)}\
{opts.on_cluster}
TO {opts.table(t.token_timelines, local=True)}
AS {_timeline_select(opts.table(t.traces, local=True), HAS_TIMELINE)}""",
            f"""CREATE VIEW IF NOT EXISTS {opts.table(t.token_events)}{opts.on_cluster}
AS {token_rows(opts.table(t.token_timelines))}"""]


# Offsets and durations are what a client sent. Moved onto a timestamp unchecked, one absurd value (an
# offset of 2^64 us, a span ending at 2^64 ns) made ClickHouse fail the whole query (DateTime64 overflow).
# Past a year they are corrupt: no request streams that long. Timestamps are computed from them cut to it.
def token_rows(timelines: str, where: str = "") -> str:
    """One row per token from the timelines in ``timelines``: the SELECT of ``llm_token_events``.

    ``where`` (a ``WHERE ...`` clause on the timelines' own columns) filters them before their text is
    parsed. A filter on the view is applied after it: a point read of one trace's timeline through the
    view parsed all 512 timelines of the granules it read (9.9 ms on the server at 1M request spans,
    against 6.3 ms with the filter inside; benchmarks/queries_latency.py). A token's ``Timestamp`` is its
    offset, cut to ``MAX_OFFSET_US``, after the request's start.
    """
    offsets = "JSONExtract(OffsetsUs, 'Array(UInt64)')"
    return f"""SELECT
    TraceId,
    SpanId,
    ServiceName,
    Model,
    Instance,
    toUInt32(index - 1) AS TokenIndex,
    addMicroseconds(start, least(offset, {MAX_OFFSET_US})) AS Timestamp,
    offset AS OffsetUs,
    gap AS GapUs
FROM (SELECT TraceId, SpanId, ServiceName, Model, Instance, Timestamp AS start, {offsets} AS offsets
      FROM {timelines}{where})
ARRAY JOIN
    offsets AS offset,
    arrayDifference(offsets) AS gap,
    arrayEnumerate(offsets) AS index"""


def _timeline_select(source: str, where: str) -> str:
    """A ``token_timelines`` row from a span that holds its timeline in ``SpanAttributes``."""
    return f"""SELECT
    TraceId,
    SpanId,
    ServiceName,
    {span_attr(attr.GEN_AI_REQUEST_MODEL)} AS Model,
    {span_attr(attr.INSTANCE)} AS Instance,
    Timestamp,
    {span_attr(attr.TOKEN_OFFSETS_US)} AS OffsetsUs
FROM {source}
WHERE {where}"""


HAS_TIMELINE = f"mapContains(SpanAttributes, {literal(attr.TOKEN_OFFSETS_US)})"
# A kept timeline that leaves otel_traces at intake: the span carries the summary our tracer writes beside
# it, so the promoted TokenGapMaxMs and TokenStallOffsetMs never need the offsets themselves.
MOVED_TIMELINE = (f"{HAS_TIMELINE} AND mapContains(SpanAttributes, {literal(attr.TOKEN_GAP_MAX_MS)}) "
                  f"AND mapContains(SpanAttributes, {literal(attr.TOKEN_STALL_OFFSET_MS)})")


def trace_intake(opts: SchemaOptions) -> list[str]:
    """Where our receiver inserts: a Null table with the exporter's columns and two views on it.

    Measured (benchmarks/pipeline_e2e.py, every request span with a 256-token timeline, ~2 KiB of
    JSON): storing each timeline twice, in otel_traces' ``SpanAttributes`` and in ``llm_token_timelines``,
    was about a third of ClickHouse's CPU per span, most of it in writing and merging the big map
    column. So a timeline that comes with its summary is stored once, in ``llm_token_timelines``: the
    first view writes the span into otel_traces without ``llm.token.offsets_us``, the second writes
    the timeline row. otel_traces' own views (trace id lookup, rollup) run on what the first writes.
    The OTel Collector, or anyone inserting into otel_traces directly, keeps the attribute in the map
    and ``llm_token_timelines_mv`` copies it as before, so ``llm_token_events`` reads the same for both.
    """
    t = opts.tables
    columns = ",\n    ".join(f"`{c}`" for c in EXPORTER_INSERT_COLUMNS if c != "SpanAttributes")
    stripped = (f"if({MOVED_TIMELINE}, mapFilter((k, v) -> k != {literal(attr.TOKEN_OFFSETS_US)}, SpanAttributes), "
                "SpanAttributes)")
    intake = opts.table(t.trace_intake, local=True)
    return [f"""CREATE TABLE IF NOT EXISTS {intake}{opts.on_cluster} (
{EXPORTER_COLUMNS.rstrip().rstrip(",")}
) ENGINE = Null""",
            *opts.distributed(t.trace_intake, "cityHash64(TraceId)"),
            f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {opts.view_of(t.traces)}{opts.on_cluster}
TO {opts.table(t.traces, local=True)}
AS SELECT
    {columns},
    {stripped} AS SpanAttributes
FROM {intake}""",
            f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {opts.table(t.timelines_from_intake, local=True)}\
{opts.on_cluster}
TO {opts.table(t.token_timelines, local=True)}
AS {_timeline_select(intake, MOVED_TIMELINE)}"""]


def per_token_events(opts: SchemaOptions) -> list[str]:
    """The token table of schema versions 2-4: one stored row per token, exploded at insert by a view.

    No migration creates it any more (version 5 replaces it by :func:`token_events`); it is kept,
    as it was, so that the upgrade is tested from the real thing and the benchmark
    (benchmarks/pipeline_profile.py --token-shapes) compares against the shape it replaced.
    """
    t = opts.tables
    days = opts.retention.tokens_days
    return [f"""CREATE TABLE IF NOT EXISTS {opts.table(t.token_events, local=True)}{opts.on_cluster} (
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    Model LowCardinality(String) CODEC(ZSTD(1)),
    Instance LowCardinality(String) CODEC(ZSTD(1)),
    TokenIndex UInt32 CODEC(Delta, ZSTD(1)),
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    OffsetUs UInt64 CODEC(Delta, ZSTD(1)),
    GapUs Int64 CODEC(ZSTD(1)),
    INDEX idx_timestamp Timestamp TYPE minmax GRANULARITY 1,
    INDEX idx_gap GapUs TYPE minmax GRANULARITY 1
) ENGINE = {opts.engine(t.token_events)}
PARTITION BY toDate(Timestamp)
ORDER BY (TraceId, SpanId, TokenIndex)
TTL toDateTime(Timestamp) + toIntervalDay({days})
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1""",
            *opts.distributed(t.token_events, "cityHash64(TraceId)"),
            f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {opts.view_of(t.token_events)}{opts.on_cluster}
TO {opts.table(t.token_events, local=True)}
AS SELECT
    TraceId,
    SpanId,
    ServiceName,
    {span_attr(attr.GEN_AI_REQUEST_MODEL)} AS Model,
    {span_attr(attr.INSTANCE)} AS Instance,
    toUInt32(index - 1) AS TokenIndex,
    addMicroseconds(Timestamp, offset) AS Timestamp,
    offset AS OffsetUs,
    gap AS GapUs
FROM {opts.table(t.traces, local=True)}
ARRAY JOIN
    {TOKEN_OFFSETS} AS offset,
    arrayDifference({TOKEN_OFFSETS}) AS gap,
    arrayEnumerate({TOKEN_OFFSETS}) AS index
WHERE mapContains(SpanAttributes, {literal(attr.TOKEN_OFFSETS_US)})"""]


def token_events_bounded(opts: SchemaOptions) -> list[str]:
    """``llm_token_events`` again, its timestamps cut to ``MAX_OFFSET_US`` (schema version 8): before, one
    timeline with an offset past DateTime64's range failed every query that read it."""
    return [f"""CREATE OR REPLACE VIEW {opts.table(opts.tables.token_events)}{opts.on_cluster}
AS {token_rows(opts.table(opts.tables.token_timelines))}"""]


def token_events_upgrade(opts: SchemaOptions) -> list[str]:
    """From the per-token table (schema before version 5) to :func:`token_events`.

    Stops the per-token view first, so nothing is written twice; the old table is renamed
    ``llm_token_events_v1`` (kept until its TTL) by :func:`infersight.pipelines.schema.migrations.migrate`
    when it finds one, and its rows are copied into ``llm_token_timelines`` (same answers through the view).
    On a cluster they are not copied: they stay in each shard's ``llm_token_events_v1_local``.
    """
    return [f"DROP TABLE IF EXISTS {opts.view_of(opts.tables.token_events)}{opts.on_cluster}"]


def backfill_timelines(opts: SchemaOptions) -> str:
    """Copy the per-token rows of an upgraded schema into one row per timeline (as JSON text)."""
    t = opts.tables
    columns = "TraceId, SpanId, ServiceName, Model, Instance, Timestamp, OffsetsUs"
    return f"""INSERT INTO {opts.table(t.token_timelines)} ({columns})
SELECT TraceId, SpanId, any(ServiceName), any(Model), any(Instance), min(subtractMicroseconds(Timestamp, OffsetUs)),
       toString(arrayMap(t -> t.2, arraySort(groupArray((TokenIndex, OffsetUs)))))
FROM {opts.table(t.token_events_v1)}
GROUP BY TraceId, SpanId"""


def requests_rollup(opts: SchemaOptions) -> list[str]:
    """Per-minute request rollup by service, model, instance, pool and strategy.

    Ordered by hour first: a window's rows sit together, which halved the per-minute percentile
    query against a dimensions-first key (benchmarks/queries_latency.py).
    """
    t = opts.tables
    days = opts.retention.rollups_days
    quantile_state = f"AggregateFunction(quantiles({QUANTILE_LEVELS}), Float64)"
    count_columns = "".join(f"    {name} SimpleAggregateFunction(sum, UInt64),\n" for name, _ in _ROLLUP_COUNTS)
    return [f"""CREATE TABLE IF NOT EXISTS {opts.table(t.requests_1m, local=True)}{opts.on_cluster} (
    Minute DateTime CODEC(Delta, ZSTD(1)),
    ServiceName LowCardinality(String),
    Model LowCardinality(String),
    Instance LowCardinality(String),
    Pool LowCardinality(String),
    Strategy LowCardinality(String),
    Requests SimpleAggregateFunction(sum, UInt64),
{count_columns}    OutputTokens SimpleAggregateFunction(sum, UInt64),
    DecodeSeconds SimpleAggregateFunction(sum, Float64),
    TtftMs {quantile_state},
    TpotMs {quantile_state},
    E2eMs {quantile_state}
) ENGINE = {opts.engine(t.requests_1m, 'AggregatingMergeTree')}
PARTITION BY toYYYYMM(Minute)
ORDER BY (toStartOfHour(Minute), ServiceName, Model, Instance, Pool, Strategy, Minute)
TTL Minute + toIntervalDay({days})
SETTINGS ttl_only_drop_parts = 1""",
            *opts.distributed(t.requests_1m, "cityHash64(Instance)"),
            f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {opts.view_of(t.requests_1m)}{opts.on_cluster}
TO {opts.table(t.requests_1m, local=True)}
AS {requests_rollup_select(opts)}"""]


_ROLLUP_COUNTS = (("Errors", Outcome.ERROR), ("Cancelled", Outcome.CANCELLED), ("Timeouts", Outcome.TIMEOUT),
                  ("Rejected", Outcome.REJECTED))


def requests_rollup_select(opts: SchemaOptions) -> str:
    """The rollup view's query: one row per minute and dimensions, timings within ``bounded``."""
    t = opts.tables
    outcome = span_attr(attr.REQUEST_OUTCOME)
    ttft, tpot = bounded(_number(attr.TTFT_MS)), bounded(_number(attr.TPOT_MS))
    output_tokens = f"toUInt64OrZero({span_attr(attr.GEN_AI_USAGE_OUTPUT_TOKENS)})"
    count_selects = "".join(f"    countIf({outcome} = {literal(value)}) AS {name},\n" for name, value in _ROLLUP_COUNTS)
    return f"""SELECT
    toStartOfMinute(Timestamp) AS Minute,
    ServiceName,
    {span_attr(attr.GEN_AI_REQUEST_MODEL)} AS Model,
    {span_attr(attr.INSTANCE)} AS Instance,
    {span_attr(attr.POOL)} AS Pool,
    {span_attr(attr.ROUTING_STRATEGY)} AS Strategy,
    count() AS Requests,
{count_selects}    sum({output_tokens}) AS OutputTokens,
    -- decode time (e2e minus TTFT) of requests that produced tokens, for tokens per second
    -- ifNull: sumIf over a Nullable argument is NULL when no row matches, which the column cannot hold
    sumIf(ifNull(greatest(Duration / 1e9 - {ttft} / 1e3, 0), 0), {output_tokens} > 0 AND {ttft} IS NOT NULL)
        AS DecodeSeconds,
    quantilesStateIf({QUANTILE_LEVELS})(assumeNotNull({ttft}), {ttft} IS NOT NULL) AS TtftMs,
    quantilesStateIf({QUANTILE_LEVELS})(assumeNotNull({tpot}), {tpot} IS NOT NULL) AS TpotMs,
    quantilesState({QUANTILE_LEVELS})(Duration / 1e6) AS E2eMs
FROM {opts.table(t.traces, local=True)}
WHERE {REQUEST_SPAN}
GROUP BY Minute, ServiceName, Model, Instance, Pool, Strategy"""


