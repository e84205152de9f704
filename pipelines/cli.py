"""``infersight receive | up | otelcol | db | traces | incident``: each part registers its own subcommands."""

from infersight.pipelines.otelcol import cli as otelcol_cli
from infersight.pipelines.queries import cli as queries_cli
from infersight.pipelines.receiver import cli as receiver_cli
from infersight.pipelines.schema import cli as schema_cli


def register(subparsers) -> None:
    receiver_cli.register(subparsers)
    otelcol_cli.register(subparsers)
    schema_cli.register(subparsers)
    queries_cli.register(subparsers)
