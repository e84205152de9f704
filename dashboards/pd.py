"""Prefill/decode pools: disaggregated serving, where prefill instances hand their KV cache to decode ones.

Everything reads the engine series' ``role`` label (prefill, decode, mixed: ``EngineRole``): from the
engine where it says so (SGLang's ``engine_type``), else from the target config. Without roles in the
fleet every panel here is empty, which is correct: nothing is disaggregated.
"""

from __future__ import annotations

from infersight.config import Config
from infersight.dashboards.panels import RATE, TOKENS_PER_S, Line, Q, dashboard, layout, stat, timeseries, variable
from infersight.signals import engine
from infersight.signals.engine import EngineRole
from infersight.thresholds import Thresholds

UID = "infersight-pd"
F = {"model": "=~$model"}


def instances(role: EngineRole | None = None, by: str = "model") -> str:
    """Instances (not data-parallel ranks) per ``by``, of one role or of each role."""
    matchers = {**F, "role": role.value} if role else F
    groups = f"{by}, role" if role is None else by
    return f"count by ({groups}) (group by ({groups}, instance) ({engine.REQUESTS_RUNNING.select(**matchers)}))"


def _now() -> list[dict]:
    ratio = f"{instances(EngineRole.PREFILL, 'model')} / {instances(EngineRole.DECODE, 'model')}"
    return [
        stat("Prefill instances", "short", [Q(f"sum({instances(EngineRole.PREFILL)})", "prefill")], width=6,
             graph=False, description="Instances with role prefill.", good="the planned count."),
        stat("Decode instances", "short", [Q(f"sum({instances(EngineRole.DECODE)})", "decode")], width=6,
             graph=False, description="Instances with role decode.", good="the planned count."),
        stat("P:D ratio", "short", [Q(ratio, "{{model}}")], width=6, decimals=2,
             description="Prefill instances per decode instance, per model.",
             good="what the prompt/output token mix needs: long prompts and short answers want more prefill."),
        stat("Requests waiting for a KV transfer", "short",
             [Q(f"sum({engine.KV_TRANSFER_QUEUE.select(**F)})", "queued")], width=6,
             description="Requests queued at any KV-transfer stage.", good="near 0."),
    ]


def _pools() -> list[dict]:
    waiting = f"sum by (model, role) ({engine.REQUESTS_WAITING.select(**F)})"
    tokens = (f"sum by (model, role) ({engine.PROMPT_TOKENS.rate(RATE, **F)})",
              f"sum by (model, role) ({engine.GENERATION_TOKENS.rate(RATE, **F)})")
    return [
        timeseries("Instances by role", "short", [Q(instances(), "{{model}} {{role}}")],
                   description="Prefill, decode and mixed instances per model.",
                   good="steady; a role losing instances shifts its queue (next panel)."),
        timeseries("Waiting requests by role", "short", [Q(waiting, "{{model}} {{role}}")],
                   description="Queues of the prefill and decode pools.",
                   good="both near 0; a queue on one side only says which pool to grow."),
        timeseries("Tokens by role", TOKENS_PER_S,
                   [Q(tokens[0], "prompt {{model}} {{role}}"), Q(tokens[1], "generated {{model}} {{role}}")],
                   description="Prompt tokens prefilled and tokens generated, by role.",
                   good="prefill instances process the prompts, decode instances generate."),
    ]


def _transfer(limits: Thresholds) -> list[dict]:
    queue = f"sum by (model, role, stage) ({engine.KV_TRANSFER_QUEUE.select(**F)})"
    duration = engine.KV_TRANSFER_DURATION.quantile(0.95, ("model", "role"), RATE, **F)
    by_source = f"sum by (model, role, source) ({engine.PROMPT_TOKENS_BY_SOURCE.rate(RATE, **F)})"
    return [
        timeseries("KV transfer queue by stage", "short", [Q(queue, "{{model}} {{role}} {{stage}}")], stack=True,
                   description="Requests waiting in each stage of the prefill-to-decode KV hand-off (SGLang: "
                               "bootstrap, inflight, prealloc, transfer; vLLM: waiting_to_start, in_progress).",
                   good="near 0 in every stage; a growing stage is the bottleneck (network, or decode memory "
                        "for prealloc)."),
        timeseries("KV transfer time p95", "s", [Q(duration, "{{model}} {{role}}")],
                   line=Line(limits.ttft_slo_seconds), width=8,
                   description="Duration of one KV transfer between instances; it adds to TTFT. The line is the "
                               "TTFT SLO.", good="a small share of the SLO."),
        timeseries("Prompt tokens by KV source", TOKENS_PER_S, [Q(by_source, "{{model}} {{role}} {{source}}")],
                   stack=True, width=8,
                   description="Where prompt tokens' KV came from: computed here, this instance's prefix cache, "
                               "or transferred from another instance.",
                   good="on decode instances almost all external_kv_transfer (else they prefill themselves)."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Now", _now()), ("Pools by role", _pools()), ("KV transfer", _transfer(limits))]
    return dashboard(UID, "infersight / Prefill and decode pools",
                     "Disaggregated serving: instances by role, the P:D ratio, each pool's queue and tokens, and the "
                     "KV transfer between them.", layout(rows),
                     [variable("model", "model", engine.REQUESTS_RUNNING.name, "model")])
