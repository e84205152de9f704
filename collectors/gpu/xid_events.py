"""XID errors from an NVML event set, counted by a background thread.

``nvmlEventSetWait_v2`` blocks until an event arrives or the timeout passes; the timeout only
exists so that the thread notices when it should stop. A timeout is the normal case, not an
error. Any other failure is counted and retried after a pause: the loop never ends on its own.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

from infersight.collectors.gpu.readings import ErrorCounts

log = logging.getLogger(__name__)
RETRY_PAUSE_SECONDS = 1.0


def handle_key(handle: Any) -> int | None:
    """The device handle's address: how an event's device is matched to its index."""
    return ctypes.cast(handle, ctypes.c_void_p).value


class XidEventLoop:
    def __init__(self, nvml: Any, handles: dict[int, Any], errors: ErrorCounts, wait_ms: int = 500):
        self.nvml = nvml
        self.errors = errors
        self.wait_ms = wait_ms
        self._index_by_key = {handle_key(h): index for index, h in handles.items()}
        self._counts: dict[int, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set = nvml.nvmlEventSetCreate()
        self.registered: list[int] = []
        for index, handle in handles.items():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._event_set)
                self.registered.append(index)
            except nvml.NVMLError:
                # Some boards (and GPUs in some virtualized setups) refuse XID events: no XIDs for them.
                errors.add(index, "nvmlDeviceRegisterEvents")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpu-xid-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - the loop must outlive any surprise; it is counted
                log.exception("XID event loop error")
                self.errors.add(None, "xid_event_loop")
                self._stop.wait(RETRY_PAUSE_SECONDS)

    def poll_once(self) -> None:
        """Wait for one event (up to the timeout) and count it if it is an XID."""
        nvml = self.nvml
        # nvmlEventSetWait_v2 where this pynvml has it (the v1 name is its older alias).
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        try:
            data = wait(self._event_set, self.wait_ms)
        except nvml.NVMLError as exc:
            if exc.value != nvml.NVML_ERROR_TIMEOUT:
                self.errors.add(None, "nvmlEventSetWait")
                self._stop.wait(RETRY_PAUSE_SECONDS)
            return
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return
        index = self._index_by_key.get(handle_key(data.device))
        if index is None:
            return
        with self._lock:
            per_device = self._counts.setdefault(index, {})
            per_device[int(data.eventData)] = per_device.get(int(data.eventData), 0) + 1

    def counts(self) -> dict[int, dict[int, int]]:
        with self._lock:
            return {index: dict(xids) for index, xids in self._counts.items()}

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.wait_ms / 1000 + 5)
            self._thread = None
        try:
            self.nvml.nvmlEventSetFree(self._event_set)
        except self.nvml.NVMLError:
            pass
