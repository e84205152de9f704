"""The GPU exporter assembled: backend + sampler + /metrics server (+ optional OTLP push).

The CLI uses it, and so can the simulator or a test that needs the running exporter in-process:

    exporter = GPUExporter(SimBackend(count=8), node="n1")
    port = exporter.start("127.0.0.1:0")
    ...
    exporter.stop()
"""

from __future__ import annotations

import time
from typing import Any

from infersight.collectors.exporter import serve
from infersight.collectors.gpu.collector import build_registry
from infersight.collectors.gpu.readings import Backend, DeviceDown, DeviceReading
from infersight.collectors.gpu.sampler import Sampler, Snapshot
from infersight.exposition import generate
from infersight.listen import Listen


class GPUExporter:
    def __init__(self, backend: Backend, node: str, interval_seconds: float = 1.0,
                 stale_after_seconds: float | None = None):
        self.backend = backend
        self.node = node
        self.sampler = Sampler(backend, interval_seconds, stale_after_seconds)
        self.registry, self.collector = build_registry(self.sampler, backend, node)
        self.health = self.collector.health
        self._server = None
        self._otlp = None

    def start(self, listen: str | Listen) -> int:
        """Take a first sample, start sampling and serving; return the bound port."""
        self.sampler.sample_once()
        self._server, _thread = serve(self.registry, listen)
        self.sampler.start()
        return self._server.server_port

    def push_otlp(self, endpoint: str, protocol: str = "http", interval_seconds: float = 10.0,
                  exporter: Any = None) -> None:
        from infersight.collectors.gpu.otlp import OTLPPush, make_exporter

        self._otlp = OTLPPush(self.sampler, self.backend, self.node, self.health,
                              exporter or make_exporter(endpoint, protocol), interval_seconds)

    def flush_otlp(self) -> bool:
        return self._otlp.force_flush() if self._otlp is not None else True

    def sample_window(self) -> Snapshot:
        """Sample twice, one interval apart, so that GPM has a window (what --once shows)."""
        self.sampler.sample_once()
        time.sleep(self.sampler.interval_seconds)
        return self.sampler.sample_once()

    def exposition(self) -> str:
        return generate(self.registry).decode()

    def rows(self) -> list[dict[str, Any]]:
        """One row per GPU from the last snapshot: the --once table/json/csv output."""
        snapshot = self.sampler.snapshot
        rows = []
        for item in snapshot.readings if snapshot else ():
            row: dict[str, Any] = {"node": self.node, "gpu": item.identity.index, "uuid": item.identity.uuid,
                                   "gpu_model": item.identity.name, "up": int(isinstance(item, DeviceReading))}
            if isinstance(item, DeviceDown):
                row["error"] = str(item.error)
            else:
                row.update(bandwidth_utilization=item.bandwidth_utilization, bandwidth_source=item.bandwidth_source,
                           utilization=item.utilization, memory_busy=item.memory_busy,
                           power_watts=item.power_watts, energy_joules=item.energy_joules,
                           temperature_celsius=item.temperature_celsius, memory_used_bytes=item.memory_used_bytes)
            rows.append(row)
        return rows

    def stop(self) -> None:
        self.sampler.stop()
        if self._otlp is not None:
            self._otlp.shutdown()
            self._otlp = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.backend.close()
