"""``infersight receive | db | traces | incident | up``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("receive", help="run the OTLP receivers (gRPC 4317, HTTP 4318) into ClickHouse") \
        .set_defaults(func=unbuilt("receive"))
    subparsers.add_parser("db", help="ClickHouse schema: migrate, render").set_defaults(func=unbuilt("db"))
    subparsers.add_parser("traces", help="post-incident trace queries").set_defaults(func=unbuilt("traces"))
    subparsers.add_parser("incident", help="incident report (HTML + Markdown)").set_defaults(func=unbuilt("incident"))
    subparsers.add_parser("up", help="start the embedded stack: local ClickHouse + receivers") \
        .set_defaults(func=unbuilt("up"))
