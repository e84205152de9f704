"""``infersight dashboards``: build the Grafana dashboards and their provisioning files."""

from __future__ import annotations

import sys

from infersight.commands.output import add_format_flag, writing_into


def register(subparsers) -> None:
    dashboards = subparsers.add_parser(
        "dashboards", help="build the Grafana dashboards",
        description="Grafana dashboards generated from the signal catalog and the alerts' recording rules, with "
                    "thresholds from the config.")
    sub = dashboards.add_subparsers(dest="dashboards_command", metavar="ACTION", title="actions")
    sub.required = True
    build = sub.add_parser(
        "build", help="write the dashboards' JSON and Grafana provisioning files",
        description="Write one JSON file per dashboard (DIR/dashboards/) and Grafana provisioning files "
                    "(DIR/provisioning/: a dashboard provider and the Prometheus and ClickHouse datasources, from "
                    "prometheus.url and clickhouse.dsn). Point Grafana's paths.provisioning at DIR/provisioning; "
                    "the ClickHouse datasource needs the grafana-clickhouse-datasource plugin. Panels that read "
                    "recording rules need the rules of 'infersight alerts build' loaded into Prometheus.")
    build.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    build.add_argument("--dashboards-path", metavar="PATH",
                       help="where Grafana reads the JSON files, if not DIR/dashboards on this machine")
    add_format_flag(build)
    build.set_defaults(func=run_build)


def run_build(args, config) -> int:
    from infersight.commands.output import render
    from infersight.dashboards.build import build
    from infersight.dashboards.datasources import PASSWORD_ENV, ProvisioningError, clickhouse_user
    from infersight.thresholds import ThresholdsError

    with writing_into("dashboards", args.out, ThresholdsError, ProvisioningError):
        written = build(config, args.out, args.dashboards_path)
    rows = [{"path": str(w.path), "kind": w.kind, "title": w.title, "panels": w.panels} for w in written]
    print(render(rows, args.format, ["path", "kind", "title", "panels"]))
    if clickhouse_user(config.clickhouse.dsn) is None:
        print(f"note: Grafana logs in as the reader of `infersight up`; set ${PASSWORD_ENV} to its password "
              f"(in {config.clickhouse.data_dir}/credentials.json)", file=sys.stderr)
    else:
        print(f"note: the ClickHouse password is not written; Grafana reads it from ${PASSWORD_ENV}", file=sys.stderr)
    return 0
