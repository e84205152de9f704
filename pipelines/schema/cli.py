"""``infersight db``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("db", help="ClickHouse schema: migrate, render").set_defaults(func=unbuilt("db"))
