"""``infersight traces slowest | show | stalls | neighbors | retries | percentiles | compare`` and
``infersight incident report``: the post-incident questions from the terminal."""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Callable

from infersight.attributes import Outcome
from infersight.commands.arguments import comma_list, enum_values, float_range, int_range, joined
from infersight.commands.output import Format, OutputError, add_format_flag, output_folder, render
from infersight.pipelines.queries.library import GROUP_COLUMNS, PERCENTILE_METRICS, SORT_COLUMNS

TRACE_ID_RE = re.compile(r"^[0-9a-fA-F]{32}$")
# Bounds that keep a typo from becoming a query that runs for minutes or overflows a parameter type.
rows_limit = int_range(1, 10_000, "rows")
gap_ms = float_range(0.0, 3_600_000.0, what="ms")
PLURALS = {"model": "models", "instance": "instances", "pool": "pools", "strategy": "strategies",
           "service": "services"}


class UserError(Exception):
    """Wrong input or an unreachable store: printed as one message, exit code 1."""


def register(subparsers) -> None:
    traces = subparsers.add_parser(
        "traces", help="post-incident trace queries",
        description="Ask the trace store the post-incident questions. Windows: --since 30m, or --from/--to "
                    "in ISO 8601 (UTC unless an offset is given).")
    actions = traces.add_subparsers(dest="traces_command", metavar="QUESTION", title="questions")
    actions.required = True

    slowest = _command(actions, "slowest", "the slowest requests in a window, by TTFT or e2e", run_slowest)
    slowest.add_argument("--by", choices=tuple(SORT_COLUMNS), default="ttft",
                         help="sort key: ttft, e2e or the longest inter-token gap (default: ttft)")
    slowest.add_argument("--limit", type=rows_limit, default=20, help="rows to show, 1-10000 (default: 20)")
    for name in ("model", "instance", "pool", "strategy"):
        slowest.add_argument(f"--{name}", help=f"only requests with this {name}")
    slowest.add_argument("--status", choices=enum_values(Outcome), metavar="OUTCOME",
                         help=f"only requests that ended so: {', '.join(enum_values(Outcome))}")
    _service_flag(slowest)

    show = _command(actions, "show", "one trace: its span tree and token timeline", run_show, window=False)
    show.add_argument("trace_id", help="32 hex characters")
    show.add_argument("--tokens", action="store_true", help="list every kept token, not only the stalls")

    stalls = _command(actions, "stalls", "longest inter-token gaps of a trace, or stalled requests in a window",
                      run_stalls)
    stalls.add_argument("trace_id", nargs="?", help="a trace: its longest gaps (otherwise: the window)")
    stalls.add_argument("--min-gap-ms", type=gap_ms, default=500.0,
                        help="window mode: requests whose longest gap exceeded this (default: 500)")
    stalls.add_argument("--top", type=int_range(1, 1000, "gaps"), default=5,
                        help="trace mode: gaps to show, 1-1000 (default: 5)")
    stalls.add_argument("--instance", help="window mode: only this instance")
    _service_flag(stalls)

    neighbors = _command(actions, "neighbors", "what else ran on an instance at a given second", run_neighbors,
                         window=False)
    neighbors.add_argument("--instance", required=True, help="the instance (llm.instance), e.g. 10.0.0.7:8000")
    neighbors.add_argument("--at", required=True, help="the instant, ISO 8601, e.g. 2026-03-01T14:05:07.250Z")
    neighbors.add_argument("--lookback", default="15m",
                           help="longest request to consider, as a duration (default: 15m)")
    _service_flag(neighbors)

    retries = _command(actions, "retries", "retry chains: attempts across instances with their backoff", run_retries)
    retries.add_argument("--min-attempts", type=int_range(1, 1000, "attempts"), default=2,
                         help="chains with at least this many attempts (default: 2)")
    retries.add_argument("--limit", type=rows_limit, default=100, help="chains to show, 1-10000 (default: 100)")

    percentiles = _command(actions, "percentiles", "TTFT (or TPOT, e2e) p50/p95/p99 per minute, from the rollup",
                           run_percentiles)
    percentiles.add_argument("--by", choices=tuple(GROUP_COLUMNS), default="instance",
                             help="one line per instance, pool, model or strategy (default: instance)")
    percentiles.add_argument("--metric", choices=tuple(PERCENTILE_METRICS), default="ttft",
                             help="time to first token, time per output token or end to end (default: ttft)")
    percentiles.add_argument("--pool", help="only this pool")
    percentiles.add_argument("--instance", help="only this instance")
    _service_flag(percentiles)

    compare = _command(actions, "compare", "canary vs stable: TTFT percentiles, tokens/s, error rate", run_compare)
    compare.add_argument("--pools", type=comma_list, help="comma-separated pools to compare (default: all)")
    _service_flag(compare)

    incident = subparsers.add_parser("incident", help="incident report (HTML + Markdown with plots)",
                                     description="Write a post-incident report for a window.")
    incident_actions = incident.add_subparsers(dest="incident_command", metavar="ACTION", title="actions")
    incident_actions.required = True
    report = incident_actions.add_parser(
        "report", help="write report.html, report.md and PNG plots for a window",
        description="Write report.html and report.md with PNG plots: TTFT p95 per instance, the worst token "
                    "timelines with their stalls, the neighbours at each stall, retries, and queue depth and "
                    "GPU bandwidth from Prometheus when one is configured.")
    _window_flags(report, default="1h")
    report.add_argument("--out", required=True, help="folder to write the report into (created if missing)")
    report.add_argument("--dsn", help="ClickHouse DSN (default: clickhouse.dsn from the config)")
    report.add_argument("--min-gap-ms", type=gap_ms, default=500.0,
                        help="inter-token gap that counts as a stall (default: 500)")
    report.add_argument("--worst", type=int_range(1, 20, "timelines"), default=5,
                        help="token timelines to plot, 1-20 (default: 5)")
    report.add_argument("--service", help="request spans of this service only (default: all, one per trace)")
    report.add_argument("--prometheus", help="Prometheus URL (default: prometheus.url; 'none' to skip)")
    report.add_argument("--grafana", metavar="URL",
                        help="Grafana base URL: trace ids link to its trace view (default: grafana.url)")
    add_format_flag(report, choices=(Format.TABLE, Format.JSON))
    report.set_defaults(func=_guarded(run_report))


def _command(actions, name: str, help_text: str, handler: Callable, window: bool = True):
    parser = actions.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
    if window:
        _window_flags(parser)
    parser.add_argument("--dsn", help="ClickHouse DSN (default: clickhouse.dsn from the config)")
    add_format_flag(parser)
    parser.set_defaults(func=_guarded(handler))
    return parser


def _window_flags(parser, default: str = "1h") -> None:
    parser.add_argument("--since", help=f"window ending now, e.g. 30m, 2h (default: {default})")
    parser.add_argument("--from", dest="start", metavar="TIME", help="window start, ISO 8601 (e.g. 2026-03-01T14:00Z)")
    parser.add_argument("--to", dest="end", metavar="TIME", help="window end, ISO 8601 (default: now)")


def _service_flag(parser) -> None:
    parser.add_argument("--service", help="only request spans of this service (default: all, one per trace)")


def _guarded(handler: Callable) -> Callable:
    """Turn expected failures into one line on stderr and exit code 1."""

    def run(args, config) -> int:
        from clickhouse_connect.driver.exceptions import ClickHouseError

        from infersight.pipelines.queries.window import WindowError
        from infersight.pipelines.schema.connection import ConnectionFailed

        try:
            return handler(args, config)
        except (UserError, WindowError, ConnectionFailed, OutputError) as exc:
            print(f"infersight: {exc}", file=sys.stderr)
        except ClickHouseError as exc:
            text = str(exc)
            hint = ("; run `infersight db migrate` first" if "UNKNOWN_TABLE" in text or "UNKNOWN_DATABASE" in text
                    else "")
            first = next((line for line in text.splitlines() if "Code:" in line), text.splitlines()[0])
            print(f"infersight: ClickHouse query failed: {first.strip()[:400]}{hint}", file=sys.stderr)
        return 1

    return run


def _store(args, config):
    """(client, database, table names) from --dsn and the config."""
    from infersight.pipelines.schema.connection import connect, database_of
    from infersight.pipelines.schema.ddl import Tables

    dsn = getattr(args, "dsn", None) or config.clickhouse.dsn
    # The embedded store's read-only reader unless the DSN names a user.
    return (connect(dsn, role="reader", data_dir=config.clickhouse.data_dir), database_of(dsn),
            Tables.from_config(config))


def _window(args, default: str = "1h"):
    from infersight.pipelines.queries.window import resolve

    return resolve(args.since, args.start, args.end, default_since=default)


def _require_known(client, db: str, window, tables, **filters) -> None:
    """Refuse a filter value with no requests in the window, naming the values that do have some.

    Without this a typo (``--pool canry``) and a quiet pool both print "(no rows)"; only one of
    them is an answer.
    """
    from infersight.pipelines.queries import library

    for dimension, values in filters.items():
        wanted = (values,) if isinstance(values, str) else tuple(values or ())
        if not wanted:
            continue
        known = library.dimension_values(client, db, window.start, window.end, dimension, tables=tables)
        missing = [v for v in wanted if v not in known]
        if missing:
            names = ", ".join(repr(v) for v in missing)
            seen = (f"{PLURALS[dimension]} with requests then: {joined(known)}" if known
                    else "there were no requests at all in that window")
            raise UserError(f"no requests with {dimension} {names} in {window}; {seen}")


def _print(rows, args, columns: list[str]) -> None:
    print(render(rows, args.format, None if args.format == "json" else columns))


def run_slowest(args, config) -> int:
    from infersight.pipelines.queries import library

    window = _window(args)
    client, db, tables = _store(args, config)
    filters = {"model": args.model, "instance": args.instance, "pool": args.pool, "strategy": args.strategy,
               "service": args.service}
    _require_known(client, db, window, **filters, tables=tables)
    rows = library.slowest(client, db, window.start, window.end, by=args.by, limit=args.limit, status=args.status,
                           **filters, tables=tables)
    _print(rows, args, ["trace_id", "started", "service", "instance", "pool", "outcome", "ttft_ms", "e2e_ms",
                        "max_gap_ms", "input_tokens", "output_tokens"])
    return 0


def _trace_id(text: str) -> str:
    if not TRACE_ID_RE.match(text):
        raise UserError(f"{text!r} is not a trace id; trace ids are 32 hex characters "
                        "(see `infersight traces slowest`)")
    return text.lower()


def run_show(args, config) -> int:
    from infersight.pipelines.queries import library

    trace_id = _trace_id(args.trace_id)
    client, db, tables = _store(args, config)
    try:
        spans, timelines = library.trace_with_timelines(client, db, trace_id, tables=tables)
    except library.TraceNotFound:
        raise UserError(f"no trace {trace_id} in database {db!r} (older than the retention, or never stored)") from None
    tokens, stalls = library.timeline_tokens(timelines), library.timeline_stalls(timelines, top=3)
    if args.format == "json":
        import json

        print(json.dumps({"spans": spans, "tokens": tokens, "stalls": stalls}, indent=2, default=str))
        return 0
    for span in spans:
        span["span"] = "  " * span["depth"] + span["name"]
        if span["candidates"]:
            span["routing"] = _routing(span)
    print(render(spans, args.format, ["span", "service", "start_ms", "duration_ms", "status", "instance", "attempt",
                                      "outcome", "ttft_ms", "input_tokens", "cached_input_tokens", "output_tokens",
                                      "routing"]))
    if args.format == "csv":
        return 0
    print()
    if not tokens:
        print("token timeline: not kept for this request (tail sampling keeps slow, failed and a random share)")
        return 0
    print(f"token timeline: {len(tokens)} tokens, first at {tokens[0]['offset_ms']} ms; longest gaps:")
    print(render(stalls, "table", ["token_index", "gap_ms", "gap_started", "gap_offset_ms", "instance"]))
    if args.tokens:
        print()
        print(render(tokens, "table", ["token_index", "offset_ms", "gap_ms", "at", "service"]))
    return 0


def _routing(span: dict) -> str:
    """The router's decision on one line: strategy, prefix-cache ratio, each candidate's score and
    estimated finish (``--format json`` keeps the candidates' JSON as stored)."""
    import json

    head = f"{span['strategy']} cache={span['prefix_cache_ratio'] or '-'}"
    try:
        candidates = json.loads(span["candidates"])
    except ValueError:
        return f"{head} {span['candidates']}"
    if not isinstance(candidates, list):
        return f"{head} {span['candidates']}"
    parts = []
    for c in candidates:
        if not isinstance(c, dict):
            continue
        figures = [f"score {c['score']:g}" if isinstance(c.get("score"), int | float) else "",
                   f"est {c['est_finish_ms']:,.0f} ms" if isinstance(c.get("est_finish_ms"), int | float) else "",
                   f"cache {c['cache_ratio']:.0%}" if isinstance(c.get("cache_ratio"), int | float) else ""]
        figures = [f for f in figures if f]
        parts.append(f"{c.get('instance', '?')}" + (f" ({', '.join(figures)})" if figures else ""))
    return f"{head}: " + "; ".join(parts)


def run_stalls(args, config) -> int:
    from infersight.pipelines.queries import library

    trace_id = _trace_id(args.trace_id) if args.trace_id else None
    client, db, tables = _store(args, config)
    if trace_id:
        timelines = library.trace_timelines(client, db, trace_id, tables=tables)
        rows = library.timeline_stalls(timelines, top=args.top)
        if not rows and not library.timeline_tokens(timelines):
            raise UserError(f"no token timeline for trace {trace_id} in database {db!r} "
                            "(unknown trace, or its timeline was not kept by tail sampling)")
        _print(rows, args, ["token_index", "gap_ms", "gap_started", "gap_offset_ms", "instance"])
        return 0
    window = _window(args)
    _require_known(client, db, window, instance=args.instance, service=args.service, tables=tables)
    rows = library.window_stalls(client, db, window.start, window.end, min_gap_ms=args.min_gap_ms,
                                 instance=args.instance, service=args.service, tables=tables)
    _print(rows, args, ["minute", "instance", "requests", "max_gap_ms", "mean_gap_ms", "first_stall_at",
                        "example_traces"])
    return 0


def run_neighbors(args, config) -> int:
    from infersight.pipelines.queries import library
    from infersight.pipelines.queries.window import Window, parse_duration, parse_time

    at, lookback = parse_time(args.at), parse_duration(args.lookback)
    if not dt.timedelta(0) < lookback <= dt.timedelta(days=1):
        raise UserError(f"--lookback {args.lookback} is out of range; give a duration from 1s to 1d, e.g. 15m")
    client, db, tables = _store(args, config)
    _require_known(client, db, Window(at - lookback, at + dt.timedelta(microseconds=1)), instance=args.instance,
                   service=args.service, tables=tables)
    rows = library.neighbors(client, db, args.instance, at, lookback=lookback, service=args.service, tables=tables)
    _print(rows, args, ["trace_id", "phase", "running_for_ms", "prompt_tokens", "cached_tokens", "prefix_cached",
                        "output_tokens", "ttft_ms", "e2e_ms", "outcome"])
    return 0


def run_retries(args, config) -> int:
    from infersight.pipelines.queries import library

    window = _window(args)
    client, db, tables = _store(args, config)
    rows = library.retries(client, db, window.start, window.end, min_attempts=args.min_attempts, limit=args.limit,
                           tables=tables)
    _print(rows, args, ["trace_id", "attempt", "instance", "started", "duration_ms", "status", "error",
                        "backoff_ms", "gap_ms"])
    return 0


def run_percentiles(args, config) -> int:
    from infersight.pipelines.queries import library

    window = _window(args)
    client, db, tables = _store(args, config)
    _require_known(client, db, window, service=args.service, pool=args.pool, instance=args.instance, tables=tables)
    rows = library.percentiles(client, db, window.start, window.end, by=args.by, metric=args.metric,
                               service=args.service, pool=args.pool, instance=args.instance, tables=tables)
    _print(rows, args, ["minute", "service", args.by, "requests", "errors",
                        *(f"{args.metric}_{p}_ms" for p in ("p50", "p95", "p99"))])
    return 0


def run_compare(args, config) -> int:
    from infersight.pipelines.queries import library

    window = _window(args)
    client, db, tables = _store(args, config)
    _require_known(client, db, window, service=args.service, pool=args.pools, tables=tables)
    rows = library.compare_pools(client, db, window.start, window.end, service=args.service, pools=args.pools or (),
                                 tables=tables)
    _print(rows, args, ["service", "pool", "strategy", "requests", "instances", "busiest_instance_share",
                        "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "slowest_instance_ttft_p99_ms", "tokens_per_s",
                        "error_rate"])
    return 0


def run_report(args, config) -> int:
    import json

    from infersight.pipelines.queries import report

    window = _window(args)
    if args.grafana and not args.grafana.startswith(("http://", "https://")):
        raise UserError(f"--grafana {args.grafana!r} is not a URL; e.g. http://127.0.0.1:3000")
    folder = output_folder(args.out)
    client, db, tables = _store(args, config)
    if args.service:
        _require_known(client, db, window, service=args.service, tables=tables)
    prometheus = args.prometheus if args.prometheus is not None else config.prometheus.url
    if prometheus and prometheus.lower() == "none":
        prometheus = None
    settings = report.Settings.from_config(config, grafana_url=args.grafana)
    try:
        written = report.write_report(client, db, window, folder, min_gap_ms=args.min_gap_ms, worst=args.worst,
                                      service=args.service or "", prometheus_url=prometheus, settings=settings)
    except OSError as exc:
        raise UserError(f"cannot write the report into {folder}: {exc.strerror or exc}") from None
    head = written.headline
    if args.format == "json":
        print(json.dumps({"headline": head.sentence, "facts": dict(head.facts), "also": head.also,
                          "skipped": written.skipped, "files": [str(p) for p in written.files]}, indent=2))
        return 0
    print(head.sentence)
    width = max(len(name) for name, _ in head.facts)
    for name, value in head.facts:
        print(f"  {name.ljust(width)}  {value}")
    for line in head.also:
        print(f"  also: {line}")
    for line in written.skipped:
        print(f"  not in the report: {line}")
    charts = len(written.files) - 2
    print(f"report: {written.html} (and {written.files[0].name}, {charts} chart{'s' if charts != 1 else ''})")
    return 0
