"""PNG plots for the incident report (matplotlib, no display needed).

Every plot shares one convention: wall-clock time (UTC) on the x axis and the stall instants as red
vertical lines, so plots can be read against each other.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.dates as mdates  # noqa: E402 - after choosing the backend
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

PHASE_COLORS = {"queued": "#b0b0b0", "prefill": "#f28e2b", "decode": "#4e79a7"}
STALL_COLOR = "#d62728"


def _time_axis(ax) -> None:
    low, high = ax.get_xlim()
    if (high - low) * 86400 < 20:  # a few seconds: whole-second labels would repeat
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: mdates.num2date(x).strftime("%H:%M:%S.%f")[:-3]))
    else:
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))


def _finish(fig, ax, path: Path, title: str) -> Path:
    ax.set_title(title, fontsize=11, loc="left")
    _time_axis(ax)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mark_stalls(ax, stalls: Sequence[dt.datetime]) -> None:
    for index, at in enumerate(stalls):
        ax.axvline(at, color=STALL_COLOR, linestyle="--", linewidth=1, label="stall" if index == 0 else None)


def ttft_per_instance(rows: list[dict[str, Any]], stalls: Sequence[dt.datetime], path: Path,
                      slo_ms: float | None = None) -> Path:
    """TTFT p95 per minute, one line per instance (and service when there are several)."""
    services = {r["service"] for r in rows}
    series: dict[str, list[tuple[dt.datetime, float]]] = {}
    for row in rows:
        label = row["instance"] or "(none)"
        if len(services) > 1:
            label += f" ({row['service']})"
        series.setdefault(label, []).append((row["minute"], row["ttft_p95_ms"]))
    fig, ax = plt.subplots(figsize=(10, 4))
    for label, points in sorted(series.items()):
        points.sort()
        # steps: each value holds for its whole minute
        ax.plot([p[0] for p in points], [p[1] for p in points], drawstyle="steps-post", label=label)
    if slo_ms:
        ax.axhline(slo_ms, color="black", linewidth=0.8, linestyle=":", label=f"SLO {slo_ms:.0f} ms")
    _mark_stalls(ax, stalls)
    ax.set_ylabel("TTFT p95 (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return _finish(fig, ax, path, "TTFT p95 per instance, per minute")


def token_timelines(timelines: list[tuple[dict[str, Any], list[dict[str, Any]]]], path: Path) -> Path:
    """Tokens received over time for the worst requests; each request's longest gap shaded red."""
    fig, axes = plt.subplots(len(timelines), 1, figsize=(10, 1.7 * len(timelines) + 0.6), sharex=True,
                             squeeze=False)
    for ax, (request, tokens) in zip(axes[:, 0], timelines, strict=True):
        times = [t["at"] for t in tokens]
        ax.step(times, [t["token_index"] for t in tokens], where="post", color="#4e79a7")
        worst = max(tokens[1:], key=lambda t: t["gap_ms"], default=None)
        if worst is not None and worst["gap_ms"] > 0:
            gap_start = worst["at"] - dt.timedelta(milliseconds=worst["gap_ms"])
            ax.axvspan(gap_start, worst["at"], color=STALL_COLOR, alpha=0.25)
            ax.annotate(f"{worst['gap_ms']:.0f} ms gap", xy=(gap_start, worst["token_index"]), fontsize=8,
                        color=STALL_COLOR, xytext=(4, 4), textcoords="offset points")
        ax.set_ylabel("tokens", fontsize=8)
        ax.text(0.005, 0.9, f"{request['trace_id'][:12]}  {request['instance']}  TTFT {request['ttft_ms']} ms",
                transform=ax.transAxes, fontsize=8, va="top")
        ax.grid(alpha=0.3)
    axes[0, 0].set_title("Token timelines of the worst requests (red: longest gap)", fontsize=11, loc="left")
    _time_axis(axes[-1, 0])
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def neighbors_gantt(instance: str, at: dt.datetime, rows: list[dict[str, Any]], path: Path) -> Path:
    """The requests on ``instance`` around a stall: queue, prefill and decode as coloured bars."""
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.4))
    labels = []
    for y, row in enumerate(rows):
        start = row["started"]
        queue = row["queue_ms"] or 0.0
        ttft = row["ttft_ms"] if row["ttft_ms"] is not None else row["e2e_ms"]
        segments = (("queued", 0.0, queue), ("prefill", queue, max(ttft - queue, 0.0)),
                    ("decode", ttft, max(row["e2e_ms"] - ttft, 0.0)))
        for phase, offset, length in segments:
            if length > 0:
                ax.barh(y, dt.timedelta(milliseconds=length), left=start + dt.timedelta(milliseconds=offset),
                        color=PHASE_COLORS[phase], label=phase)
        cached = f", {row['cached_tokens']} cached" if row["cached_tokens"] else ", no cached prefix"
        labels.append(f"{row['trace_id'][:8]}  {row['prompt_tokens']} prompt tok{cached}")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    _mark_stalls(ax, [at])
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=False))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, axis="x")
    return _finish(fig, ax, path, f"On {instance} at the stall {at:%H:%M:%S.%f}"[:-3] + " UTC")


def retry_chains(rows: list[dict[str, Any]], path: Path, limit: int = 20) -> Path:
    """Each retried request as a row of attempts: green succeeded, red failed, labelled by instance."""
    chains: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["trace_id"] in chains or len(chains) < limit:
            chains.setdefault(row["trace_id"], []).append(row)
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(chains) + 1.4))
    for y, attempts in enumerate(chains.values()):
        for attempt in attempts:
            ok = attempt["status"] != "error"
            ax.barh(y, dt.timedelta(milliseconds=attempt["duration_ms"]), left=attempt["started"],
                    color="#59a14f" if ok else STALL_COLOR, alpha=0.8)
            ax.annotate(f"#{attempt['attempt']} {attempt['instance']}", xy=(attempt["started"], y), fontsize=7,
                        xytext=(2, -3), textcoords="offset points")
    ax.set_yticks(range(len(chains)), [t[:12] for t in chains], fontsize=8)
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")
    return _finish(fig, ax, path, "Retry chains: attempts per request (red failed, green succeeded)")


def prometheus_series(title: str, ylabel: str, series: list[tuple[str, list[tuple[dt.datetime, float]]]],
                      stalls: Sequence[dt.datetime], path: Path, window: tuple[dt.datetime, dt.datetime]) -> Path:
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for label, points in series:
        ax.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1.2, marker=".",
                markersize=3)
    ax.set_xlim(*window)  # the whole incident window, even where Prometheus has no samples
    _mark_stalls(ax, stalls)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _finish(fig, ax, path, title)
