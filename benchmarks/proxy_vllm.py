"""The instrumenting proxy in front of a real vLLM (CPU build, the tests' tiny model): what it adds per token.

The same streaming chat requests (``ignore_eos``, ``--tokens`` each) go straight to vLLM (the
baseline) and through the proxy (full instrumentation: metrics, spans encoded as for OTLP, tail
sampling, per-chunk usage), alternating one by one in the same run so both see the same machine.
Per request the client measures TTFT, the time from first to last token and e2e; the figures are
medians, and "added per token" is (proxy e2e - direct e2e) / tokens. It also checks that the proxy
timed every token (its inter-token histogram has tokens - 1 gaps per request) while vLLM sent fewer
text chunks.

    .venv/bin/python benchmarks/proxy_vllm.py                 # about two minutes, vLLM start included
    .venv/bin/python benchmarks/proxy_vllm.py --requests 20 --format json

Measured here (--requests 6 --tokens 64, machine load average 17-20 on 2 cores, so vLLM took
260 ms per token): TTFT 372 vs 351 ms (1.06x direct), time per token 252 vs 260 ms (0.97x: the
proxy's cost is below the noise), e2e 0.996x; the proxy timed 63 gaps per request, exactly
tokens - 1, while vLLM sent 42 text chunks per 64 tokens.

Needs ``make vllm-venv``. Loopback and two shared cores: vLLM itself takes most of the CPU, so the
proxy's share shows as a small ratio; run it on an idle machine for absolute figures.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests.engines

from benchmarks.proxy_latency import _proxy_process, _start  # noqa: E402
from infersight.signals import request  # noqa: E402


def _stream(base: str, tokens: int) -> dict:
    body = json.dumps({"model": "tiny-llama", "messages": [{"role": "user", "content": "Benchmark, please: 東京 🙂"}],
                       "max_tokens": tokens, "stream": True, "ignore_eos": True}).encode()
    request = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    start = time.perf_counter()
    first = last = None
    chunks = 0
    with urllib.request.urlopen(request, timeout=300) as response:
        for line in response:
            if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    end = time.perf_counter()
    return {"ttft": first - start, "decode": last - first, "e2e": end - start, "chunks": chunks}


def _proxy_gaps(proxy: str) -> float:
    with urllib.request.urlopen(proxy + "/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"{request.INTER_TOKEN.name}_count{{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=12, help="requests per side (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per request (default: %(default)s)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if args.requests < 1 or not 2 <= args.tokens <= 900:
        parser.error("--requests must be >= 1 and --tokens within 2..900")

    from tests.conftest import free_port
    from tests.engines import vllm_server

    why = vllm_server.missing()
    if why:
        print(f"proxy_vllm: {why}", file=sys.stderr)
        return 2
    # A SIGTERM (timeout, Ctrl-C's cousin) still runs the finally below: vLLM is stopped by its PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print("starting vLLM (30-60 s) ...", file=sys.stderr, flush=True)
    server = vllm_server.VLLMServer(free_port(), Path(tempfile.mkdtemp(prefix="infersight-bench-")) / "vllm.log")
    proxy_process = None
    try:
        server.start()
        proxy_process, proxy_port = _start(_proxy_process, server.base_url)
        proxy = f"http://127.0.0.1:{proxy_port}"
        _stream(server.base_url, 8), _stream(proxy, 8)  # warm both paths
        gaps_before = _proxy_gaps(proxy)
        runs: dict[str, list[dict]] = {"direct": [], "proxy": []}
        for i in range(args.requests):
            print(f"request {i + 1}/{args.requests}", file=sys.stderr, flush=True)
            for side, base in (("direct", server.base_url), ("proxy", proxy)) if i % 2 == 0 else (
                    ("proxy", proxy), ("direct", server.base_url)):
                runs[side].append(_stream(base, args.tokens))
        gaps = _proxy_gaps(proxy) - gaps_before
    finally:
        if proxy_process is not None:
            proxy_process.terminate()
        server.stop()

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[side])

    result = {"requests": args.requests, "tokens": args.tokens, "vllm_ready_s": round(server.ready_seconds, 1)}
    for key in ("ttft", "decode", "e2e"):
        direct, proxied = median("direct", key), median("proxy", key)
        result[key] = {"direct_ms": round(direct * 1e3, 2), "proxy_ms": round(proxied * 1e3, 2),
                       "ratio": round(proxied / direct, 3)}
    direct_tpot = median("direct", "decode") / (args.tokens - 1)
    proxy_tpot = median("proxy", "decode") / (args.tokens - 1)
    result["per_token"] = {"direct_us": round(direct_tpot * 1e6, 1), "proxy_us": round(proxy_tpot * 1e6, 1),
                           "ratio": round(proxy_tpot / direct_tpot, 3),
                           "added_us": round((median("proxy", "e2e") - median("direct", "e2e")) / args.tokens * 1e6,
                                             1)}
    result["counting"] = {"text_chunks_per_request": median("direct", "chunks"),
                          "proxy_gaps_per_request": gaps / args.requests, "expected_gaps": args.tokens - 1}
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        print(f"vLLM ready in {result['vllm_ready_s']} s; {args.requests} requests x {args.tokens} tokens per side")
        print(f"{'':10} {'direct':>10} {'proxy':>10} {'ratio':>7}")
        for key in ("ttft", "decode", "e2e"):
            r = result[key]
            print(f"{key + ' ms':10} {r['direct_ms']:>10} {r['proxy_ms']:>10} {r['ratio']:>7}")
        p = result["per_token"]
        print(f"{'token us':10} {p['direct_us']:>10} {p['proxy_us']:>10} {p['ratio']:>7}   "
              f"added per token {p['added_us']} us")
        c = result["counting"]
        print(f"tokens timed by the proxy: {c['proxy_gaps_per_request']:.0f} gaps per request (exact: "
              f"{c['expected_gaps']}); vLLM sent {c['text_chunks_per_request']:.0f} text chunks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
