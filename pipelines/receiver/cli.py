"""``infersight receive`` and ``infersight up``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("receive", help="run the OTLP receivers (gRPC 4317, HTTP 4318) into ClickHouse") \
        .set_defaults(func=unbuilt("receive"))
    subparsers.add_parser("up", help="start the embedded stack: local ClickHouse + receivers") \
        .set_defaults(func=unbuilt("up"))
