"""``infersight collect gpu``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    subparsers.add_parser("gpu", help="GPU exporter (NVML/GPM or simulated)").set_defaults(func=unbuilt("collect gpu"))
