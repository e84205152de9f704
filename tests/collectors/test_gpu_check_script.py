"""benchmarks/gpu_check.sh (the real-GPU check) in its dry-run form: the script's plumbing works."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"


def test_dry_run_with_the_simulator_passes_every_check():
    cli = Path(sys.executable).parent / "infersight"
    env = {**os.environ, "GPU_CHECK_BACKEND": "sim", "PYTHON": sys.executable,
           "INFERSIGHT": str(cli) if cli.exists() else (shutil.which("infersight") or "")}
    result = subprocess.run(["bash", str(SCRIPT), "1"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    for check in ("bandwidth utilization rose", "power rose", "energy grew"):
        assert f"PASS  {check}" in result.stdout
    assert "source" in result.stdout and "gpm" in result.stdout
