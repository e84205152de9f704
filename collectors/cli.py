"""``infersight collect gpu|engine|gateway``: each collector registers its own subcommand."""

from infersight.collectors.engine import cli as engine_cli
from infersight.collectors.gateway import cli as gateway_cli
from infersight.collectors.gpu import cli as gpu_cli


def register(subparsers) -> None:
    p = subparsers.add_parser("collect", help="run a collector: GPU (NVML/GPM, dcgm-exporter), engine or gateway "
                                              "/metrics normalizer")
    sub = p.add_subparsers(dest="collector", metavar="COLLECTOR", required=True)
    gpu_cli.register(sub)
    engine_cli.register(sub)
    gateway_cli.register(sub)
