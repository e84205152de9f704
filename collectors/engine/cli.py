"""``infersight collect engine``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("engine", help="engine metrics normalizer").set_defaults(func=unbuilt("collect engine"))
