"""Per-product mapping tables: llm-d EPP, vLLM production-stack router, LiteLLM, OTel GenAI metrics.

Product metric names appear only here, written from each product's current source (the README
names repository, path and commit). Where a product renamed a family, the current name comes
first and the deprecated ones follow; the first present wins, never both.
"""

from __future__ import annotations

import functools
import urllib.parse

from infersight.attributes import Outcome
from infersight.instances import instance_name
from infersight.signals import gateway as gw
from infersight.signals import request as req

from .rules import Derived, Families, Labels, Rule, SourceSpec, first_present


@functools.lru_cache(maxsize=4096)
def endpoint(url_or_address: str) -> str:
    """``host:port`` of a backend URL (``http://10.0.0.5:8000`` or ``10.0.0.5:8000/v1``), else ``""``."""
    text = url_or_address.strip()
    if not text:
        return ""
    parts = urllib.parse.urlsplit(text if "://" in text else f"//{text}")
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return ""
    if not parts.hostname or port is None:
        return ""
    return instance_name(parts.hostname, port)


# -- llm-d EPP (llm-d/llm-d-router; the Gateway API Inference Extension's endpoint picker) --------------
# Request and latency families carry {model_name, target_model_name, fairness_id, priority}; fairness and
# priority are summed away. target_model_name is the model the engines serve (after a rewrite).
def _epp(current: str, *deprecated: str) -> tuple[str, ...]:
    return (f"llm_d_epp_{current}", *deprecated)


EPP_REQUESTS = (_epp("request_total", "inference_objective_request_total", "inference_model_request_total"),
                _epp("request_error_total", "inference_objective_request_error_total",
                     "inference_model_request_error_total"))
# Flow control's request-queue outcomes that mean "turned away" (llm_d_epp_flow_control_request_queue_duration_seconds).
EPP_REJECTED_OUTCOMES = {"RejectedCapacity": "capacity", "RejectedOther": "other"}


def _epp_outcomes(families: Families) -> list[Derived]:
    """Succeeded = all requests - errored ones, per label set, from one generation of names."""
    totals, errors = EPP_REQUESTS
    total_name = first_present(families, totals)
    if total_name is None:
        return []
    error_name = errors[totals.index(total_name)]
    sums: dict[tuple, list] = {}
    for sample in families[total_name]:
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k in ("model_name", "target_model_name")))
        sums.setdefault(key, [sample.labels, 0.0, 0.0])[1] += sample.value
    for sample in families.get(error_name, ()):
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k in ("model_name", "target_model_name")))
        sums.setdefault(key, [sample.labels, 0.0, 0.0])[2] += sample.value
    out: list[Derived] = []
    for labels, total, failed in sums.values():
        out.append((req.REQUESTS, labels, {"outcome": Outcome.SUCCESS}, max(0.0, total - failed)))
        out.append((req.REQUESTS, labels, {"outcome": Outcome.ERROR}, failed))
    return out


EPP = SourceSpec(
    kind="epp",
    model_labels=("target_model_name", "model_name"),
    pool_labels=("inference_pool", "name"),
    signature=("llm_d_epp_", "inference_objective_", "inference_pool_", "inference_model_", "inference_extension_"),
    rules=(
        Rule(gw.QUEUE_DEPTH, _epp("flow_control_queue_size", "inference_extension_flow_control_queue_size")),
        Rule(req.E2E, _epp("request_duration_seconds", "inference_objective_request_duration_seconds",
                           "inference_model_request_duration_seconds")),
        Rule(req.TTFT, _epp("request_ttft_seconds")),
        Rule(req.TPOT, _epp("request_streaming_tpot_seconds")),
        Rule(req.INTER_TOKEN, _epp("request_streaming_itl_seconds")),
        Rule(req.INPUT_TOKENS, _epp("request_input_tokens", "inference_objective_input_tokens",
                                    "inference_model_input_tokens"), take="_sum"),
        Rule(req.OUTPUT_TOKENS, _epp("request_output_tokens", "inference_objective_output_tokens",
                                     "inference_model_output_tokens"), take="_sum"),
        Rule(req.CACHED_INPUT_TOKENS, _epp("request_cached_tokens", "inference_objective_prompt_cached_tokens"),
             take="_sum"),
        Rule(req.IN_FLIGHT, _epp("request_running", "inference_objective_running_requests",
                                 "inference_model_running_requests")),
        Rule(req.QUEUE_TIME, _epp("flow_control_request_queue_duration_seconds",
                                  "inference_extension_flow_control_request_queue_duration_seconds"),
             where=lambda labels: labels.get("outcome") == "Dispatched"),
        Rule(req.REJECTIONS, _epp("flow_control_request_queue_duration_seconds",
                                  "inference_extension_flow_control_request_queue_duration_seconds"),
             take="_count", where=lambda labels: labels.get("outcome") in EPP_REJECTED_OUTCOMES,
             extra=lambda labels: {"reason": EPP_REJECTED_OUTCOMES[labels["outcome"]]}),
    ),
    derive=_epp_outcomes,
    derive_sources=EPP_REQUESTS[0] + EPP_REQUESTS[1],
)


# -- vLLM production-stack router (vllm-project/production-stack, src/vllm_router) ----------------------
# Its per-backend series carry `server`, the backend URL: that is the instance. Its `vllm:` names are the
# router's own, next to copies of engine gauges; none of them is an engine's exposition.
def _router_health(families: Families) -> list[Derived]:
    """vllm:healthy_pods_total{server} is 1 or 0 per backend: healthy or out of rotation (ejected)."""
    out: list[Derived] = []
    for sample in families.get("vllm:healthy_pods_total", ()):
        healthy = 1.0 if sample.value >= 1 else 0.0
        out.append((gw.INSTANCE_STATE, sample.labels, {"state": "healthy"}, healthy))
        out.append((gw.INSTANCE_STATE, sample.labels, {"state": "ejected"}, 1.0 - healthy))
    return out


ROUTER_STATUS_OUTCOMES = {"success": Outcome.SUCCESS, "error": Outcome.ERROR}
VLLM_ROUTER = SourceSpec(
    kind="vllm-router",
    model_labels=("model",),
    model_by_instance=True,
    instance=lambda labels: endpoint(labels.get("server", "")),
    # Families only the router writes (vLLM engines never do): they tell a router from an engine.
    signature=("vllm:healthy_pods_total", "vllm:current_qps", "vllm:num_incoming_requests",
               "vllm:request_latency_seconds", "vllm:avg_latency"),
    rules=(
        Rule(req.IN_FLIGHT, ("vllm:num_requests_running",)),  # prefill + decode requests the router has open
        Rule(req.E2E, ("vllm:request_latency_seconds",)),
        Rule(req.REQUESTS, ("vllm:request_latency_seconds",), take="_count",
             where=lambda labels: labels.get("status") in ROUTER_STATUS_OUTCOMES,
             extra=lambda labels: {"outcome": ROUTER_STATUS_OUTCOMES[labels["status"]]}),
        Rule(req.INPUT_TOKENS, ("vllm:input_tokens_total",)),
        Rule(req.OUTPUT_TOKENS, ("vllm:output_tokens_total",)),
    ),
    derive=_router_health,
    derive_sources=("vllm:healthy_pods_total",),
)


# -- LiteLLM proxy (BerriAI/litellm, litellm/integrations/prometheus.py) ----------------------------------
# Deployment series carry `api_base`, the backend URL: the instance. Labels naming people or keys
# (user, end_user, hashed_api_key, api_key_alias, team, user_email, client_ip, user_agent) are never
# copied: only the catalog's labels are written.
LITELLM_STATES = {0: "healthy", 1: "half_open", 2: "ejected"}  # 0 healthy, 1 partial outage, 2 complete outage


def _litellm_states(families: Families) -> list[Derived]:
    out: list[Derived] = []
    for sample in families.get("litellm_deployment_state", ()):
        current = LITELLM_STATES.get(int(sample.value))
        if current is None:
            continue
        for state in LITELLM_STATES.values():
            out.append((gw.INSTANCE_STATE, sample.labels, {"state": state}, 1.0 if state == current else 0.0))
    return out


LITELLM = SourceSpec(
    kind="litellm",
    model_labels=("model_group", "requested_model", "model", "litellm_model_name"),
    model_aliases=("model_id", "litellm_model_name", "model"),
    instance=lambda labels: endpoint(labels.get("api_base", "")),
    signature=("litellm_",),
    rules=(
        Rule(req.REQUESTS, ("litellm_deployment_success_responses_total",),
             extra=lambda labels: {"outcome": Outcome.SUCCESS}),
        Rule(req.REQUESTS, ("litellm_deployment_failure_responses_total",),
             extra=lambda labels: {"outcome": Outcome.ERROR}),
        Rule(gw.EJECTIONS, ("litellm_deployment_cooled_down_total",)),  # the router took it out of rotation
        Rule(req.RETRIES, ("litellm_deployment_successful_fallbacks_total",)),
        Rule(req.RETRIES, ("litellm_deployment_failed_fallbacks_total",)),
        Rule(req.TPOT, ("litellm_deployment_latency_per_output_token",)),
        Rule(req.E2E, ("litellm_request_total_latency_metric",)),
        Rule(req.TTFT, ("litellm_llm_api_time_to_first_token_metric",)),
        Rule(req.QUEUE_TIME, ("litellm_request_queue_time_seconds",)),
        Rule(req.INPUT_TOKENS, ("litellm_input_tokens_total", "litellm_input_tokens_metric_total")),
        Rule(req.OUTPUT_TOKENS, ("litellm_output_tokens_total", "litellm_output_tokens_metric_total")),
    ),
    derive=_litellm_states,
    derive_sources=("litellm_deployment_state",),
)


# -- OpenTelemetry GenAI metrics in Prometheus form (Envoy AI Gateway, any OTel-instrumented gateway) --------
# The OTel Prometheus exporter writes gen_ai.server.time_to_first_token (unit s) as
# gen_ai_server_time_to_first_token_seconds and attributes with underscores (gen_ai_request_model).
TOKEN_TYPES = {"input": req.INPUT_TOKENS, "output": req.OUTPUT_TOKENS, "cached_input": req.CACHED_INPUT_TOKENS}


def _genai_instance(labels: Labels) -> str:
    address, port = labels.get("server_address", ""), labels.get("server_port", "")
    return instance_name(address, int(port)) if address and port.isdigit() else ""


def _token_rule(token_type: str) -> Rule:
    return Rule(TOKEN_TYPES[token_type], ("gen_ai_client_token_usage", "gen_ai_server_token_usage"), take="_sum",
                where=lambda labels: labels.get("gen_ai_token_type") == token_type)


OTEL_GENAI = SourceSpec(
    kind="otel-genai",
    model_labels=("gen_ai_request_model", "gen_ai_response_model", "gen_ai_original_model"),
    instance=_genai_instance,
    signature=("gen_ai_",),
    rules=(
        Rule(req.TTFT, ("gen_ai_server_time_to_first_token_seconds",
                        "gen_ai_client_operation_time_to_first_chunk_seconds")),
        Rule(req.TPOT, ("gen_ai_server_time_per_output_token_seconds",)),
        Rule(req.E2E, ("gen_ai_server_request_duration_seconds", "gen_ai_client_operation_duration_seconds")),
        Rule(req.REQUESTS, ("gen_ai_server_request_duration_seconds", "gen_ai_client_operation_duration_seconds"),
             take="_count",
             extra=lambda labels: {"outcome": Outcome.ERROR if labels.get("error_type") else Outcome.SUCCESS}),
        *(_token_rule(token_type) for token_type in TOKEN_TYPES),
    ),
)

# Detection order: the most specific signatures first (a router's `vllm:` names before anything generic).
SOURCES: dict[str, SourceSpec] = {spec.kind: spec for spec in (EPP, VLLM_ROUTER, LITELLM, OTEL_GENAI)}
