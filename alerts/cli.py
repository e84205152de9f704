"""``infersight alerts``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("alerts", help="build Prometheus rules, Alertmanager config and their tests") \
        .set_defaults(func=unbuilt("alerts"))
