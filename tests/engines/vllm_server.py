"""A real vLLM (CPU build) on 127.0.0.1 serving the tiny model, for tests and benchmarks.

``make vllm-venv`` installs vLLM into ``.venv-vllm/`` (``make test`` does it first). The model is
built once into ``.venv-vllm/tiny-model`` by :mod:`tests.engines.tiny_model`; vLLM's compile
caches live in ``.venv-vllm/scratch`` so a second start is warm (about 30 s instead of 50 s).
One server takes about 3.2 GiB of memory and most of a core while it works: start one per
session and stop it by its PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("INFERSIGHT_VLLM_VENV", ROOT / ".venv-vllm"))
PYTHON = VENV / "bin" / "python"
MODEL_DIR = VENV / "tiny-model"
SCRATCH = VENV / "scratch"
SERVED_MODEL = "tiny-llama"
SERVICE_NAME = "vllm"  # OTEL_SERVICE_NAME of the traced server
READY_TIMEOUT_S = 300.0  # a cold start on two busy cores; usually 30-60 s
# The openai clients' deadline per request: generous, because tests wait for events, not durations
# (at a load of 20 on two shared cores, eight 160-token requests on four sequences took over 120 s).
CLIENT_TIMEOUT_S = 600.0
# Small enough that a few concurrent requests queue and fill the KV cache: 4 sequences at once,
# 48 blocks of 32 tokens (1,536 tokens) of KV cache (the CPU attention wants blocks of 32).
DEFAULT_ARGS = ("--max-model-len", "1024", "--enable-prefix-caching", "--enable-prompt-tokens-details",
                "--max-num-seqs", "4", "--num-gpu-blocks-override", "48", "--block-size", "32",
                "--dtype", "float32")


def missing() -> str | None:
    """Why no real vLLM can run here, or None when it can."""
    if not (VENV / ".installed").exists() or not PYTHON.exists():
        return f"no vLLM venv at {VENV} (run `make vllm-venv`)"
    return None


def _environment() -> dict[str, str]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update({
        "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(SCRATCH / "vllm-cache"), "TMPDIR": str(SCRATCH / "tmp"),
        "TORCHINDUCTOR_CACHE_DIR": str(SCRATCH / "inductor"), "HF_HOME": str(SCRATCH / "hf"),
        "PYTHONUNBUFFERED": "1",
    })
    (SCRATCH / "tmp").mkdir(exist_ok=True)
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)
    return env


def ensure_model() -> Path:
    """The tiny model's folder, built (in the vLLM venv) when missing or out of date."""
    from tests.engines import tiny_model

    stamp = MODEL_DIR / "STAMP"
    if not stamp.exists() or stamp.read_text() != tiny_model.VERSION:
        subprocess.run([str(PYTHON), str(Path(tiny_model.__file__)), str(MODEL_DIR)], env=_environment(),
                       check=True, capture_output=True, timeout=600)
    return MODEL_DIR


class VLLMServer:
    """One vLLM OpenAI API server process; ``base_url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, port: int, log_path: Path, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.port = port
        self.host = "127.0.0.1"
        self.base_url = f"http://{self.host}:{port}"
        self.instance = f"{self.host}:{port}"
        self.log_path = log_path
        self.extra_args = tuple(extra_args)
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.ready_seconds: float | None = None

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = READY_TIMEOUT_S) -> VLLMServer:
        model = ensure_model()
        command = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                   "--served-model-name", SERVED_MODEL, "--host", self.host, "--port", str(self.port),
                   *DEFAULT_ARGS, *self.extra_args]
        env = _environment() | self.extra_env
        started = time.monotonic()
        log = open(self.log_path, "ab")
        # Its own process group: vLLM starts an engine-core child, and stop() must end both.
        self.proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(SCRATCH))
        log.close()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            if self._ready():
                self.ready_seconds = time.monotonic() - started
                return self
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"vLLM not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/v1/models", timeout=2) as resp:
                return resp.status == 200 and SERVED_MODEL in json.loads(resp.read()).get("data", [{}])[0].get("id", "")
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:
            return resp.read().decode()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Stop the server and its engine-core child (its process group, by the PID we started)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        # The engine core may outlive the API server for a moment: end what is left of the group.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


if __name__ == "__main__":  # a manual check: start, print the ready time and the metric names, stop
    sys.path.insert(0, str(ROOT))
    server = VLLMServer(int(sys.argv[1]) if len(sys.argv) > 1 else 8765, SCRATCH / "manual.log").start()
    print(f"ready in {server.ready_seconds:.1f} s at {server.base_url}")
    server.stop()
