"""``infersight demo``: the main job on the embedded default.

Until the simulator lands, the demo prints the capacity plan of the configured model.
"""

from __future__ import annotations

from types import SimpleNamespace

from infersight.commands.plan import run_plan
from infersight.config import Config


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="run the demo on this machine (embedded defaults, no GPU needed)")
    p.set_defaults(func=run_demo)


def run_demo(args, config: Config) -> int:
    print("infersight demo: capacity plan for the configured model on every GPU preset\n")
    return run_plan(SimpleNamespace(gpu="all", context=None, rate=None, format="table"), config)
