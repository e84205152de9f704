"""``infersight otelcol render | check``: the OpenTelemetry Collector path for large sites."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    otelcol = subparsers.add_parser(
        "otelcol", help="OpenTelemetry Collector config writing to our schema (for sites beyond one receiver)",
        description="Print or check the OpenTelemetry Collector (contrib) configuration that writes to the same "
                    "ClickHouse tables as `infersight receive` (clickhouse exporter, create_schema: false, tail "
                    "sampling that keeps slow and failed traces). Run `infersight db migrate` first.")
    actions = otelcol.add_subparsers(dest="otelcol_command", metavar="ACTION", title="actions")
    actions.required = True
    render = actions.add_parser("render", help="print the config with values from infersight.yaml")
    render.add_argument("--tier", choices=("collector", "loadbalancer"), default="collector",
                        help="collector: writes to ClickHouse (default); loadbalancer: routes traces to collectors")
    render.set_defaults(func=run_render)
    check = actions.add_parser("check", help="check a Collector config file against the documented options")
    check.add_argument("file", help="the Collector YAML to check")
    check.set_defaults(func=run_check)


def run_render(args, config) -> int:
    from infersight.pipelines.otelcol.config import render

    print(render(config, args.tier), end="")
    return 0


def run_check(args, config) -> int:
    import yaml

    from infersight.pipelines.otelcol.config import check

    try:
        with open(args.file) as f:
            document = yaml.safe_load(f)
    except OSError as exc:
        print(f"infersight otelcol check: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    except yaml.YAMLError as exc:
        print(f"infersight otelcol check: {args.file} is not valid YAML: {exc}", file=sys.stderr)
        return 2
    from infersight.pipelines.schema.ddl import Tables

    problems = check(document, Tables.from_config(config).traces)
    for problem in problems:
        print(f"{args.file}: {problem}", file=sys.stderr)
    if not problems:
        print(f"{args.file}: ok")
    return 1 if problems else 0
