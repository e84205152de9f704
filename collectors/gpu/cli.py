"""``infersight collect gpu``: the GPU exporter (NVML + GPM, or a simulated fleet)."""

from __future__ import annotations

import argparse
import sys

from infersight.capacity import GPU_PRESETS
from infersight.commands.output import FORMATS, Format, add_format_flag

EXAMPLES = """\
examples:
  infersight collect gpu                                  # NVML, serve /metrics on 127.0.0.1:9835
  infersight collect gpu --backend sim --sim-count 8      # a simulated H100 fleet, no GPU needed
  infersight collect gpu --backend nvml --once --format table
  infersight collect gpu --otlp-endpoint http://127.0.0.1:4318   # also push over OTLP/HTTP
  infersight collect gpu --backend dcgm --source http://10.0.0.5:9400/metrics   # read a running dcgm-exporter
  infersight collect gpu --source http://127.0.0.1:9400/metrics --once --format table
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gpu", help="GPU exporter (NVML/GPM, a running dcgm-exporter, or simulated)",
        description="Serve GPU metrics (bandwidth utilization, power, energy, clocks, throttle reasons, "
                    "ECC and XID errors) on /metrics for Prometheus. With nvml or sim a background thread "
                    "samples every GPU and a scrape never waits for it; with dcgm each scrape reads the "
                    "dcgm-exporters given as sources and serves their series as the same gpu_* signals.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("nvml", "sim", "dcgm"),
                   help="device backend (default: gpus.backend, nvml; dcgm when --source is given)")
    p.add_argument("--source", action="append", default=[], metavar="URL",
                   help="with --backend dcgm: a dcgm-exporter /metrics URL, e.g. http://10.0.0.5:9400/metrics "
                        "(repeatable; default: gpus.dcgm.sources)")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="where to serve /metrics (default: listeners.gpu_exporter, 127.0.0.1:9835; port 0 "
                        "picks a free port)")
    p.add_argument("--once", action="store_true", help="sample (twice, one interval apart), print and exit")
    add_format_flag(p, Format.PROMETHEUS, (Format.PROMETHEUS, *FORMATS),
                    help="output of --once (default: prometheus exposition text; prom is accepted too)")
    p.add_argument("--node", help="the node label (default: gpus.node, else the host name; with dcgm, the "
                                  "exporter's hostname label)")
    p.add_argument("--interval", type=float, metavar="SECONDS",
                   help="sampling interval and GPM window (default: gpus.sample_interval_seconds, 1)")
    p.add_argument("--sim-count", type=int, metavar="N", help="simulated GPUs (default: gpus.sim.count, 8)")
    p.add_argument("--sim-type", choices=list(GPU_PRESETS), help="simulated GPU type (default: gpus.sim.type)")
    p.add_argument("--sim-load", metavar="COMPUTE,BANDWIDTH",
                   help="demand on every simulated GPU as shares of peak, e.g. 0.2,0.9 (default: gpus.sim)")
    p.add_argument("--otlp-endpoint", metavar="URL", help="also push metrics over OTLP (default: gpus.otlp_endpoint)")
    p.add_argument("--otlp-protocol", choices=("http", "grpc"), help="OTLP transport (default: gpus.otlp_protocol)")
    p.set_defaults(func=run)


class UsageError(Exception):
    """A bad option value: printed with a hint, exit code 2."""


def _sim_load(text: str | None, config) -> tuple[float, float]:
    if text is None:
        return config.gpus.sim.compute, config.gpus.sim.bandwidth
    try:
        compute, bandwidth = (float(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--sim-load {text!r}: expected COMPUTE,BANDWIDTH, e.g. 0.2,0.9") from None
    if not (0 <= compute <= 1 and 0 <= bandwidth <= 1):
        raise UsageError(f"--sim-load {text!r}: both shares must be between 0 and 1")
    return compute, bandwidth


def _build_backend(args, config, node: str):
    backend = args.backend or config.gpus.backend
    if backend == "sim":
        from infersight.collectors.gpu.sim import SimBackend

        count = args.sim_count if args.sim_count is not None else config.gpus.sim.count
        if count < 1:
            raise UsageError(f"--sim-count {count}: need at least one GPU")
        compute, bandwidth = _sim_load(args.sim_load, config)
        sim = SimBackend(count, args.sim_type or config.gpus.sim.type, node=node)
        sim.set_all_loads(compute, bandwidth)
        return sim
    from infersight.collectors.gpu.nvml_backend import NVMLBackend

    return NVMLBackend()


def run(args, config) -> int:
    backend = args.backend or ("dcgm" if args.source else config.gpus.backend)
    if backend == "dcgm":
        return _run_dcgm(args, config)
    if args.source:
        print(f"infersight collect gpu: --source is for --backend dcgm, not {backend}", file=sys.stderr)
        return 2
    return _run_device(args, config)


def _run_device(args, config) -> int:
    import socket

    from infersight.collectors.gpu.app import GPUExporter
    from infersight.collectors.gpu.readings import BackendUnavailable

    node = args.node or config.gpus.node or socket.gethostname()
    interval = args.interval if args.interval is not None else config.gpus.sample_interval_seconds
    endpoint = args.otlp_endpoint or config.gpus.otlp_endpoint
    try:
        if interval <= 0:
            raise UsageError(f"--interval {interval}: must be positive")
        if endpoint and not endpoint.startswith(("http://", "https://")):
            raise UsageError(f"--otlp-endpoint {endpoint!r}: expected a URL like http://127.0.0.1:4318")
        backend = _build_backend(args, config, node)
    except (UsageError, BackendUnavailable) as exc:
        print(f"infersight collect gpu: {exc}", file=sys.stderr)
        return 2
    exporter = GPUExporter(backend, node, interval, config.gpus.stale_after_seconds)
    if args.once:
        return _once(exporter, args.format)
    return _serve(exporter, args, config)


def _once(exporter, fmt: str) -> int:
    from infersight.commands.output import render

    try:
        exporter.sample_window()
        print(exporter.exposition() if fmt == Format.PROMETHEUS else render(exporter.rows(), fmt))
    finally:
        exporter.backend.close()
    down = [row["gpu"] for row in exporter.rows() if not row["up"]]
    if down:
        print(f"infersight collect gpu: GPU {', '.join(map(str, down))} did not answer (gpu_up 0)", file=sys.stderr)
        return 1
    return 0


def _serve(exporter, args, config) -> int:
    from infersight.collectors.exporter import parse_listen, wait_until_stopped

    listen = args.listen or config.listeners.gpu_exporter
    try:
        address = parse_listen(listen)
        port = exporter.start(address)
    except (ValueError, OSError) as exc:
        exporter.backend.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"infersight collect gpu: cannot listen on {listen}: {reason} (pick another with --listen HOST:PORT)",
              file=sys.stderr)
        return 2
    endpoint = args.otlp_endpoint or config.gpus.otlp_endpoint
    if endpoint:
        exporter.push_otlp(endpoint, args.otlp_protocol or config.gpus.otlp_protocol, config.gpus.otlp_interval_seconds)
    print(f"serving {len(exporter.sampler.devices)} GPUs ({exporter.backend.name}) on "
          f"http://{address.with_port(port)}/metrics",
          flush=True)
    try:
        wait_until_stopped()
    finally:
        exporter.stop()
    return 0


# -- backend dcgm: read running dcgm-exporters -------------------------------------------------------
def _dcgm_sources(args, config) -> list:
    from infersight.collectors.gpu.dcgm_collector import DcgmSource

    node = args.node or config.gpus.node or ""
    if args.source:
        if node and len(args.source) > 1:
            raise UsageError("--node names one node; with several --source URLs each exporter's hostname "
                             "label names its node (or set gpus.dcgm.sources[].node)")
        specs = [(url, node) for url in args.source]
    else:
        specs = [(s.url, s.node or node) for s in config.gpus.dcgm.sources]
    if not specs:
        raise UsageError("--backend dcgm needs a dcgm-exporter: pass --source http://HOST:9400/metrics or set "
                         "gpus.dcgm.sources in infersight.yaml")
    sources = []
    for url, source_node in specs:
        try:
            sources.append(DcgmSource(url, source_node))
        except ValueError as exc:
            raise UsageError(f"--source {exc}") from None
    if len({s.url for s in sources}) != len(sources):
        raise UsageError("a dcgm-exporter URL is given twice")
    return sources


def _run_dcgm(args, config) -> int:
    from infersight.collectors.gpu.dcgm_collector import DcgmCollector

    ignored = [flag for flag, value in (("--otlp-endpoint", args.otlp_endpoint), ("--sim-count", args.sim_count),
                                        ("--sim-type", args.sim_type), ("--sim-load", args.sim_load),
                                        ("--interval", args.interval)) if value is not None]
    try:
        if ignored:
            raise UsageError(f"{', '.join(ignored)} do not apply to --backend dcgm (dcgm-exporter samples on its "
                             "own interval; push its series with the OpenTelemetry Collector's prometheus receiver)")
        sources = _dcgm_sources(args, config)
    except UsageError as exc:
        print(f"infersight collect gpu: {exc}", file=sys.stderr)
        return 2
    dcgm = config.gpus.dcgm
    collector = DcgmCollector(sources, dcgm.timeout_seconds, dcgm.max_bytes, log_changes=not args.once)
    try:
        if args.once:
            return _dcgm_once(collector, args.format)
        return _dcgm_serve(collector, args, config)
    finally:
        collector.close()


def _dcgm_once(collector, fmt: str) -> int:
    from infersight.collectors.gpu.dcgm_collector import exposition
    from infersight.commands.output import render

    results = collector.scrape()
    if fmt == Format.PROMETHEUS:
        sys.stdout.write(exposition(collector, results))
    else:
        print(render(collector.rows(), fmt, DCGM_COLUMNS))
    failed = [r for r in results if not r.up]
    for r in failed:
        print(f"infersight collect gpu: dcgm-exporter {r.source.url} failed: {r.reason}: {r.detail}",
              file=sys.stderr)
    return 1 if failed else 0


DCGM_COLUMNS = ("node", "gpu", "uuid", "gpu_model", "up", "bandwidth_utilization", "bandwidth_source",
                "utilization", "power_watts", "energy_joules", "temperature_celsius", "memory_used_bytes",
                "last_xid", "pods", "error")


def _dcgm_serve(collector, args, config) -> int:
    from infersight.collectors.exporter import parse_listen, serve_until_stopped
    from infersight.collectors.gpu.dcgm_collector import build_registry

    listen = args.listen or config.listeners.gpu_exporter
    try:
        address = parse_listen(listen)
    except ValueError as exc:
        print(f"infersight collect gpu: cannot listen on {listen}: {exc} (pick another with --listen HOST:PORT)",
              file=sys.stderr)
        return 2
    return serve_until_stopped("collect gpu", build_registry(collector), address,
                               f"GPUs of {len(collector.sources)} dcgm-exporter(s)", announce=sys.stdout)
