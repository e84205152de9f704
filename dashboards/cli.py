"""``infersight dashboards``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("dashboards", help="build the Grafana dashboards").set_defaults(func=unbuilt("dashboards"))
