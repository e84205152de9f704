"""``infersight collect gpu|engine``."""

from infersight.commands.unbuilt import unbuilt


def register(subparsers) -> None:
    p = subparsers.add_parser("collect", help="run a collector: GPU (NVML/GPM) or engine /metrics normalizer")
    sub = p.add_subparsers(dest="collector", metavar="COLLECTOR", required=True)
    sub.add_parser("gpu", help="GPU exporter").set_defaults(func=unbuilt("collect gpu"))
    sub.add_parser("engine", help="engine metrics normalizer").set_defaults(func=unbuilt("collect engine"))
