"""A scenario's series are the same on every run: nothing in the simulation may depend on the
interpreter's string hashing (set or dict order of strings, ``hash()``-seeded randomness) or on the
wall clock. Two ``infersight simulate`` processes with different PYTHONHASHSEED values must write
byte-identical series; the healthy baseline has two models, a canary on cache-aware routing and
round-robin, so routing, prefix caches and the per-model traffic all take part.
"""

from __future__ import annotations

import os
import subprocess
import sys

SCENARIO, HOURS = "healthy-baseline", "0.25"


def _series(tmp_path, hash_seed: str) -> bytes:
    out = tmp_path / f"hash-seed-{hash_seed}"
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-m", "infersight", "simulate", "--scenario", SCENARIO, "--hours", HOURS,
                           "--format", "promtool", "--out", str(out), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return (out / "series.yml").read_bytes()


def test_two_processes_with_different_string_hashing_write_the_same_series(tmp_path):
    first, second = _series(tmp_path, "0"), _series(tmp_path, "4242")
    assert first.count(b"series:") > 100, "the run recorded almost nothing: the comparison would prove nothing"
    if first != second:
        a, b = first.decode().splitlines(), second.decode().splitlines()
        diff = next((i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        raise AssertionError(f"series differ from line {diff[0]}:\n  {diff[1][:300]}\n  {diff[2][:300]}")
