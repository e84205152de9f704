"""``infersight plan`` (capacity model) and ``infersight version``."""

from __future__ import annotations

import json
import sys

from infersight import __version__
from infersight.capacity import GPU_PRESETS, CapacityPlan, human_bytes, plan
from infersight.commands.arguments import float_range, int_range
from infersight.commands.output import Format, add_format_flag
from infersight.config import Config


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="capacity model: KV cache, decode and prefill ceilings, concurrency per GPU",
        description="Turn the model and GPU specs of the config into capacity figures. "
                    "The model comes from the config's capacity section; flags override the rest.")
    p.add_argument("--gpu", help=f"GPU preset, or 'all' to compare every preset ({', '.join(GPU_PRESETS)})")
    p.add_argument("--context", type=int_range(1, 10_000_000, "tokens"), metavar="TOKENS",
                   help="context length per request, prompt + output (default: capacity.context_tokens)")
    p.add_argument("--rate", type=float_range(0.0, 100_000.0, low_open=True, what="tokens/s"), metavar="TOK_PER_S",
                   help="per-request decode rate target (default: capacity.target_tokens_per_s)")
    add_format_flag(p, choices=(Format.TABLE, Format.JSON))
    p.set_defaults(func=run_plan)

    v = subparsers.add_parser("version", help="print the version")
    v.set_defaults(func=lambda args, config: print(f"infersight {__version__}") or 0)


def plans_for(config: Config, gpu: str | None = None, context: int | None = None,
              rate: float | None = None) -> list[CapacityPlan]:
    cap = config.capacity
    if gpu and gpu != "all" and gpu not in GPU_PRESETS:
        raise ValueError(f"unknown GPU {gpu!r}; expected one of {', '.join(GPU_PRESETS)} or 'all'")
    if gpu == "all":
        specs = list(GPU_PRESETS.values())
    elif gpu:
        specs = [GPU_PRESETS[gpu]]
    else:
        specs = [cap.gpu_spec()]
    return [
        plan(cap.model, spec, context_tokens=cap.context_tokens if context is None else context,
             prefill_utilization=cap.prefill_utilization,
             target_tokens_per_s=cap.target_tokens_per_s if rate is None else rate,
             memory_utilization=cap.memory_utilization)
        for spec in specs
    ]


def run_plan(args, config: Config) -> int:
    try:
        plans = plans_for(config, args.gpu, args.context, args.rate)
    except ValueError as exc:
        print(f"infersight plan: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps([p.as_dict() for p in plans], indent=2))
        return 0
    first = plans[0]
    print(f"model {first.model}: weights {first.weight_bytes / 1e9:.1f} GB, "
          f"KV cache {human_bytes(first.kv_bytes_per_token)} per token, "
          f"{human_bytes(first.kv_bytes_per_request)} per {first.context_tokens}-token request")
    rows = [
        ("GPU", lambda p: p.gpu),
        ("KV capacity", lambda p: f"{p.kv_capacity_tokens:,} tok"),
        (f"requests @{first.context_tokens} (KV)", lambda p: f"{p.max_concurrent_requests_by_kv:,}"),
        ("decode ceiling", lambda p: f"{p.decode_tokens_per_s_ceiling:,.0f} tok/s"),
        ("prefill", lambda p: f"{p.prefill_tokens_per_s:,.0f} tok/s"),
        (f"prefill {first.context_tokens} tok", lambda p: f"{p.prefill_seconds_for_context:.2f} s"),
        (f"requests @{first.target_tokens_per_s_per_request:g} tok/s",
         lambda p: f"{p.max_concurrent_requests_at_target:,}"),
    ]
    table = [[name, *(fmt(p) for p in plans)] for name, fmt in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for i, row in enumerate(table):
        pairs = enumerate(zip(row, widths, strict=True))
        cells = (cell.ljust(w) if j == 0 else cell.rjust(w) for j, (cell, w) in pairs)
        print("  ".join(cells))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return 0
