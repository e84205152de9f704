"""``infersight prometheus render``: a prometheus.yml for our exporters and the rules of ``alerts build``."""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import tempfile
from pathlib import Path

from infersight.commands.output import Format, add_format_flag, fail

EPILOG = """\
jobs: gpu (listeners.gpu_exporter), engine (listeners.engine_exporter; by default only when engines
are configured), gateway (listeners.gateway_exporter; only when gateways are configured), proxy
(listeners.proxy; only when asked for), receiver (listeners.otlp_http).

examples:
  infersight alerts build --out /etc/prometheus/infersight
  infersight prometheus render --rules /etc/prometheus/infersight --out /etc/prometheus/prometheus.yml --check
  infersight prometheus render --job gpu --job engine --job proxy --host 10.0.0.7
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("prometheus", help="render a Prometheus configuration for infersight",
                              description="Prometheus configuration rendered from infersight.yaml.")
    sub = p.add_subparsers(dest="prometheus_command", metavar="ACTION", title="actions")
    sub.required = True
    render = sub.add_parser(
        "render", help="print prometheus.yml: scrape jobs for our exporters, rule_files for alerts build",
        description="Print a Prometheus configuration: one scrape job per infersight exporter (honor_labels: "
                    "true, job names prometheus.job_prefix + component, matching thresholds.exporter_jobs) and "
                    "rule_files pointing at the rules that `infersight alerts build` wrote.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    render.add_argument("--rules", metavar="DIR", help="the --out folder of `infersight alerts build`; "
                                                       "rule_files then load DIR/rules/*.yml")
    render.add_argument("--job", action="append", default=[], metavar="COMPONENT",
                        help="scrape this exporter (gpu, engine, gateway, proxy, receiver; repeatable; default: "
                             "gpu, receiver, and engine and gateway when the config lists targets for them)")
    render.add_argument("--host", help="address Prometheus reaches the exporters at (default: their listen "
                                       "address; loopback for 0.0.0.0)")
    render.add_argument("--scrape-interval", default="15s", metavar="DURATION",
                        help="global scrape and rule evaluation interval (default: 15s)")
    render.add_argument("--alertmanager", action="append", default=[], metavar="HOST:PORT",
                        help="send alerts to this Alertmanager (repeatable)")
    render.add_argument("--out", metavar="FILE", help="write here instead of printing")
    add_format_flag(render, Format.YAML, (Format.YAML, Format.JSON), help="yaml (default) or json")
    render.add_argument("--check", action="store_true", help="then run `promtool check config` on the result "
                                                             "(it checks the rule files too)")
    render.set_defaults(func=run_render)


_fail = functools.partial(fail, "prometheus render")


def run_render(args, config) -> int:
    from infersight.listen import parse_listen
    from infersight.prometheus_config import RenderError, render, to_yaml

    for address in args.alertmanager:
        try:
            parse_listen(address, what="--alertmanager", example="127.0.0.1:9093")
        except ValueError as exc:
            return _fail(str(exc), 2)
    if args.rules is not None and not (Path(args.rules) / "rules").is_dir():
        return _fail(f"--rules {args.rules}: no rules/ folder there; run `infersight alerts build --out "
                     f"{args.rules}` first", 2)
    try:
        document, comments = render(config, args.job or None, rules_dir=args.rules, out=args.out,
                                    scrape_interval=args.scrape_interval, host=args.host,
                                    alertmanagers=args.alertmanager)
    except RenderError as exc:
        return _fail(str(exc), 2)
    if args.format == "json":
        text = json.dumps(document, indent=2) + "\n"
    else:
        text = to_yaml(document, comments, "`infersight prometheus render`")
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            return _fail(f"cannot write {args.out}: {exc.strerror or exc}", 1)
    else:
        sys.stdout.write(text)
    if args.rules is None:
        print("note: no --rules: the config loads no alert rules (run `infersight alerts build --out DIR`, then "
              "pass --rules DIR)", file=sys.stderr)
    return _check(text, args.out, args.rules is not None) if args.check else 0


def _check(text: str, out: str | None, expect_rules: bool) -> int:
    from infersight.alerts import tools

    with tempfile.TemporaryDirectory(prefix="infersight-prometheus-") as scratch:
        path = Path(out) if out else Path(scratch) / "prometheus.yml"
        if not out:
            path.write_text(text)
        try:
            result = tools.check_config(path)
        except tools.ToolMissing as exc:
            return _fail(str(exc), 1)
    if not result.ok:
        return _fail(f"promtool check config failed:\n{result.output}", 1)
    found = re.search(r"(\d+) rule files? found", result.output)
    count = int(found.group(1)) if found else 0
    if expect_rules and count == 0:
        return _fail("promtool check config found no rule files where rule_files points; check --rules", 1)
    print(f"promtool check config: ok ({count} rule files)", file=sys.stderr)
    return 0
