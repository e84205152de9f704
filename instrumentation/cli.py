"""``infersight proxy``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    p = subparsers.add_parser("proxy", help="instrumenting reverse proxy for OpenAI-compatible engines")
    p.set_defaults(func=unbuilt("proxy"))
