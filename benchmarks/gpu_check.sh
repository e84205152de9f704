#!/usr/bin/env bash
# Check the NVML backend on a real GPU: one `--once` sample idle, one under a bandwidth-heavy load
# (a large tensor copy loop in torch), then print bandwidth utilization (with its source), power
# and energy for both, and whether they moved as they must.
#
#   benchmarks/gpu_check.sh [GPU_INDEX]          # default GPU 0
#
# Environment: INFERSIGHT (the CLI; default .venv/bin/infersight, else infersight on PATH),
# PYTHON (with torch for the load; default .venv/bin/python, else python3), LOAD_SECONDS (default 20),
# GPU_CHECK_BACKEND=sim for a dry run of this script on a machine without a GPU (the load is then
# the simulator's --sim-load instead of torch).
#
# Exit status: 0 when bandwidth utilization rose, power rose and energy grew under load; 1 when
# one of them did not; 2 when the check could not run (no NVML, no torch, no CLI).
set -euo pipefail
cd "$(dirname "$0")/.."

GPU="${1:-0}"
LOAD_SECONDS="${LOAD_SECONDS:-20}"
BACKEND="${GPU_CHECK_BACKEND:-nvml}"
INFERSIGHT="${INFERSIGHT:-$( [ -x .venv/bin/infersight ] && echo .venv/bin/infersight || command -v infersight || true)}"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || command -v python3 || true)}"
WORK="$(mktemp -d)"
LOAD_PID=""
cleanup() {
    if [ -n "$LOAD_PID" ]; then kill "$LOAD_PID" 2>/dev/null || true; wait "$LOAD_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "$INFERSIGHT" ] || [ -z "$PYTHON" ]; then
    echo "gpu_check: need the infersight CLI and python (run make demo first, or set INFERSIGHT and PYTHON)" >&2
    exit 2
fi

# One sample pair (--once samples twice, one interval apart, so GPM has a window).
snapshot() {  # $1: output file, $2...: extra CLI options
    local out="$1"; shift
    if ! "$INFERSIGHT" collect gpu --backend "$BACKEND" --once --format json --interval 1 --node gpu-check "$@" \
            >"$out" 2>"$WORK/stderr"; then
        # exit 1 means a GPU did not answer: the JSON still says which; 2 means NVML is unusable.
        if ! [ -s "$out" ]; then cat "$WORK/stderr" >&2; exit 2; fi
        cat "$WORK/stderr" >&2
    fi
}

if [ "$BACKEND" = nvml ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | sed 's/^/gpu_check: /'
fi

echo "gpu_check: idle sample on GPU $GPU ($BACKEND backend)"
snapshot "$WORK/idle.json"
IDLE_AT=$(date +%s.%N)

if [ "$BACKEND" = sim ]; then
    echo "gpu_check: dry run: simulated load instead of torch"
    snapshot "$WORK/load.json" --sim-load 0.3,0.9
else
    if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        echo "gpu_check: $PYTHON has no torch with CUDA: install torch to generate the bandwidth load" >&2
        exit 2
    fi
    echo "gpu_check: starting a ${LOAD_SECONDS}s tensor copy loop on GPU $GPU"
    # NVML numbers GPUs in PCI bus order; make CUDA agree so the load lands on the GPU we read.
    CUDA_DEVICE_ORDER=PCI_BUS_ID "$PYTHON" - "$GPU" "$LOAD_SECONDS" "$WORK/load.ready" <<'PY' &
import sys, time, pathlib
import torch

gpu, seconds, ready = int(sys.argv[1]), float(sys.argv[2]), pathlib.Path(sys.argv[3])
device = torch.device(f"cuda:{gpu}")
source = torch.empty(1 << 30, dtype=torch.uint8, device=device)  # 1 GiB: far beyond any cache
target = torch.empty_like(source)
end = time.monotonic() + seconds
copies = 0
while time.monotonic() < end:
    for _ in range(20):
        target.copy_(source)  # reads 1 GiB and writes 1 GiB of device memory
    torch.cuda.synchronize(device)
    copies += 20
    if copies == 20:
        ready.touch()
print(f"gpu_check: load copied {copies * 2} GiB in {seconds:.0f}s", file=sys.stderr)
PY
    LOAD_PID=$!
    for _ in $(seq 1 300); do [ -e "$WORK/load.ready" ] && break; sleep 0.1; done
    [ -e "$WORK/load.ready" ] || { echo "gpu_check: the torch load did not start" >&2; exit 2; }
    sleep 3  # let power and the GPM window settle under load
    snapshot "$WORK/load.json"
fi
LOAD_AT=$(date +%s.%N)

"$PYTHON" - "$WORK/idle.json" "$WORK/load.json" "$GPU" "$IDLE_AT" "$LOAD_AT" <<'PY'
import json, sys

idle_rows, load_rows = (json.load(open(path)) for path in sys.argv[1:3])
gpu, idle_at, load_at = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
idle = next(r for r in idle_rows if r["gpu"] == gpu)
load = next(r for r in load_rows if r["gpu"] == gpu)
if not (idle["up"] and load["up"]):
    print(f"gpu_check: GPU {gpu} did not answer: {idle.get('error') or load.get('error')}")
    sys.exit(1)

def show(value, unit=""):
    return "absent" if value is None else f"{value:,.3f}{unit}"

print(f"\nGPU {gpu}: {idle['gpu_model']} ({idle['uuid']})")
print(f"{'':24}{'idle':>16}{'under load':>16}")
print(f"{'bandwidth utilization':<24}{show(idle['bandwidth_utilization']):>16}{show(load['bandwidth_utilization']):>16}")
print(f"{'  source':<24}{idle['bandwidth_source']:>16}{load['bandwidth_source']:>16}")
print(f"{'SM utilization':<24}{show(idle['utilization']):>16}{show(load['utilization']):>16}")
print(f"{'power':<24}{show(idle['power_watts'], ' W'):>16}{show(load['power_watts'], ' W'):>16}")
print(f"{'energy counter':<24}{show(idle['energy_joules'], ' J'):>16}{show(load['energy_joules'], ' J'):>16}")

checks = []
bw_idle, bw_load = idle["bandwidth_utilization"], load["bandwidth_utilization"]
checks.append(("bandwidth utilization rose", bw_idle is not None and bw_load is not None and bw_load > bw_idle))
checks.append(("power rose", (load["power_watts"] or 0) > (idle["power_watts"] or 0)))
energy = None
if idle["energy_joules"] is not None and load["energy_joules"] is not None:
    energy = load["energy_joules"] - idle["energy_joules"]
    print(f"{'energy between samples':<24}{energy:>15,.1f} J  (mean {energy / (load_at - idle_at):,.1f} W "
          f"over {load_at - idle_at:.1f} s)")
checks.append(("energy grew", energy is not None and energy > 0))
print()
for name, ok in checks:
    print(f"gpu_check: {'PASS' if ok else 'FAIL'}  {name}")
sys.exit(0 if all(ok for _, ok in checks) else 1)
PY
