"""``infersight traces`` and ``infersight incident``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("traces", help="post-incident trace queries").set_defaults(func=unbuilt("traces"))
    subparsers.add_parser("incident", help="incident report (HTML + Markdown)").set_defaults(func=unbuilt("incident"))
