"""``infersight alerts``: build Prometheus rules, Alertmanager config and their promtool tests."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from infersight.commands.output import add_format_flag, fail, writing_into


def register(subparsers) -> None:
    alerts = subparsers.add_parser(
        "alerts", help="build Prometheus rules, Alertmanager config and their tests",
        description="Alert rules generated from the signal catalog, with thresholds from the config and the "
                    "capacity model.")
    sub = alerts.add_subparsers(dest="alerts_command", metavar="ACTION", title="actions")
    sub.required = True

    build = sub.add_parser(
        "build", help="write rules/*.yml, alertmanager.yml and tests/*_test.yml",
        description="Write the recording and alerting rules (rules/), the Alertmanager configuration "
                    "(alertmanager.yml) and the promtool unit tests (tests/) into DIR. Secrets are referenced "
                    "by file (alertmanager.pagerduty_routing_key_file, slack_api_url_file), never written.")
    build.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    build.add_argument("--check", action="store_true",
                       help="then run promtool check rules, promtool test rules and amtool check-config")
    build.set_defaults(func=run_build)

    listing = sub.add_parser("list", help="list the alerts with severity, signal and summary",
                             description="The alerts the current config produces.")
    add_format_flag(listing)
    listing.set_defaults(func=run_list)


_fail = functools.partial(fail, "alerts")


def run_build(args, config) -> int:
    from infersight.alerts.build import build
    from infersight.thresholds import ThresholdsError

    with writing_into("alerts", args.out, ThresholdsError):
        built = build(config, args.out)
    print(f"wrote {len(built.rule_files)} rule files ({built.alert_count} alerts, {built.recording_count} "
          f"recording rules), {len(built.test_files)} promtool test files and alertmanager.yml to {built.out}")
    am = config.alertmanager
    if not am.pagerduty_routing_key_file:
        print("note: alertmanager.pagerduty_routing_key_file is not set; critical alerts go to the ticket webhook",
              file=sys.stderr)
    if not am.slack_api_url_file:
        print("note: alertmanager.slack_api_url_file is not set; warnings go to the ticket webhook", file=sys.stderr)
    for key in ("pagerduty_routing_key_file", "slack_api_url_file"):
        path = getattr(am, key)
        if path and not Path(path).is_file():
            print(f"note: alertmanager.{key} {path} does not exist on this machine; Alertmanager must find it "
                  "where it runs", file=sys.stderr)
    return _check(built) if args.check else 0


def _check(built) -> int:
    from infersight.alerts import tools

    steps = [("promtool check rules", lambda: tools.check_rules(built.rule_files)),
             ("promtool test rules", lambda: tools.test_rules(built.test_files)),
             ("amtool check-config", lambda: tools.check_alertmanager(built.alertmanager))]
    for name, step in steps:
        try:
            result = step()
        except tools.ToolMissing as exc:
            return _fail(str(exc), 1)
        if not result.ok:
            return _fail(f"{name} failed:\n{result.output}", 1)
        print(f"{name}: ok")
    return 0


def run_list(args, config) -> int:
    from infersight.alerts.rulefiles import runbook_url
    from infersight.alerts.rules import all_alerts
    from infersight.commands.output import render
    from infersight.thresholds import ThresholdsError, thresholds_from_config

    try:
        limits = thresholds_from_config(config)
    except ThresholdsError as exc:
        return _fail(str(exc), 2)
    rows = [{"alert": a.name, "severity": a.severity.value, "signal": a.signal.value, "for": a.for_,
             "summary": a.summary, "runbook": runbook_url(limits, a)} for a in all_alerts(limits)]
    columns = ["alert", "severity", "signal", "for", "summary"] if args.format == "table" else None
    print(render(rows, args.format, columns))
    return 0
