"""PNG charts for the incident report (matplotlib, no display needed).

One chart answers one question, and every chart follows the same rules: its title is the question
in plain words, axes carry units, clock times are UTC and say so, the SLO or threshold the reader
judges against is drawn and labelled, stalls are the same red everywhere, and legends sit outside
the data so they never cover it.
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
from matplotlib.ticker import FuncFormatter, PercentFormatter  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

PHASE_COLORS = {"queued": "#b0b0b0", "awaiting first token": "#e6c9a8", "prefill": "#f28e2b", "decode": "#4e79a7"}
STALL_COLOR = "#d62728"
OK_COLOR = "#59a14f"
LIMIT_COLOR = "#333333"
# tab10 without its red: red means a stall or a failure in every chart
LINE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
matplotlib.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=LINE_COLORS)
WIDTH_IN = 10.0
DPI = 110
MAX_LINES = 8  # more lines than this stop being readable; the worst ones are drawn


def _clock_formatter(span_seconds: float) -> FuncFormatter:
    """Tick labels as precise as the window needs: minutes, seconds or milliseconds."""
    if span_seconds > 3 * 3600:
        fmt, cut = "%H:%M", 0
    elif span_seconds > 30:
        fmt, cut = "%H:%M:%S", 0
    else:
        fmt, cut = "%H:%M:%S.%f", 3
    return FuncFormatter(lambda x, _: mdates.num2date(x).strftime(fmt)[:-cut or None])


def _time_axis(ax, window: tuple[dt.datetime, dt.datetime]) -> None:
    start, end = window
    if end <= start:
        end = start + dt.timedelta(seconds=1)
    ax.set_xlim(start, end)
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=4, maxticks=8))
    ax.xaxis.set_major_formatter(_clock_formatter((end - start).total_seconds()))
    ax.set_xlabel("time (UTC)")


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def _mark_stalls(ax, stalls: Sequence[tuple[dt.datetime, float]]) -> None:
    """Each stall as a red band from its start over its gap (a line when the band is too thin to see)."""
    for index, (at, gap_ms) in enumerate(stalls):
        label = "token stall" if index == 0 else None
        # behind the data (zorder 0): the band must not tint the bars and lines it marks
        ax.axvspan(at, at + dt.timedelta(milliseconds=gap_ms), color=STALL_COLOR, alpha=0.15, label=label, zorder=0)
        ax.axvline(at, color=STALL_COLOR, linewidth=1, linestyle="--", zorder=0)


def _legend_outside(ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=False))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0, frameon=False)


def ttft_by_instance(rows: list[dict[str, Any]], slo_p95_ms: float, path: Path) -> Path:
    """Was TTFT within its target? p95 per instance over the window as bars, p99 as a tick, the target as a line."""
    rows = sorted(rows, key=lambda r: (r["ttft_p95_ms"] or 0))[-12:]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.45 * len(rows) + 1.6))
    several = len({r["service"] for r in rows}) > 1
    labels = [f"{r['instance'] or '(no instance)'}" + (f" · {r['service']}" if several else "")
              + f"  ({r['requests']:,} req)" for r in rows]
    p95 = [r["ttft_p95_ms"] or 0 for r in rows]
    colors = [STALL_COLOR if v > slo_p95_ms else "#4e79a7" for v in p95]
    ax.barh(range(len(rows)), p95, color=colors, height=0.6, label="p95")
    ax.scatter([r["ttft_p99_ms"] or 0 for r in rows], range(len(rows)), marker="|", s=260, color="black",
               label="p99", zorder=3)
    for y, (value, row) in enumerate(zip(p95, rows, strict=True)):
        # after the p99 tick when it is further right, so the two never overlap; then it names the
        # p99 too, or a "p95 16,705 ms" beside a tick at 20,613 ms reads as that tick's value
        p99 = row["ttft_p99_ms"] or 0
        text = f"p95 {value:,.0f} ms" + (f" · p99 {p99:,.0f} ms" if round(p99) > round(value) else "")
        ax.annotate(text, (max(value, p99), y), xytext=(8, 0), textcoords="offset points", va="center", fontsize=8)
    ax.axvline(slo_p95_ms, color=LIMIT_COLOR, linestyle=":", linewidth=1.2, label=f"p95 target {slo_p95_ms:,.0f} ms")
    ax.set_yticks(range(len(rows)), labels, fontsize=9)
    ax.set_xlabel("time to first token (ms)")
    # room for the labels ("p95 19,217 ms · p99 20,878 ms" after the rightmost tick), clear of the legend
    ax.set_xlim(0, max([*p95, *(r["ttft_p99_ms"] or 0 for r in rows), slo_p95_ms]) * 1.55)
    ax.grid(alpha=0.3, axis="x")
    ax.set_title("Was TTFT within target? p95 per instance over the window (red: over target)", loc="left",
                 fontsize=11)
    _legend_outside(ax)
    return _save(fig, path)


def ttft_per_minute(rows: list[dict[str, Any]], slo_p95_ms: float, stalls: Sequence[tuple[dt.datetime, float]],
                    window: tuple[dt.datetime, dt.datetime], path: Path) -> Path:
    """When did TTFT leave its target? p95 per minute, one line per instance (the worst few), the target line."""
    series: dict[str, list[tuple[dt.datetime, float]]] = {}
    several = len({r["service"] for r in rows}) > 1
    for row in rows:
        if row["ttft_p95_ms"] is not None:
            label = (row["instance"] or "(no instance)") + (f" · {row['service']}" if several else "")
            series.setdefault(label, []).append((row["minute"], row["ttft_p95_ms"]))
    worst = sorted(series, key=lambda k: max(v for _, v in series[k]), reverse=True)[:MAX_LINES]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4))
    for label in sorted(worst):
        points = sorted(series[label])
        # a minute's value holds for the whole minute: draw it as a step that ends at the minute's end
        xs = [p[0] for p in points] + [points[-1][0] + dt.timedelta(minutes=1)]
        ys = [p[1] for p in points] + [points[-1][1]]
        ax.step(xs, ys, where="post", label=label, linewidth=1.5)
        ax.plot([p[0] + dt.timedelta(seconds=30) for p in points], [p[1] for p in points], "o", markersize=3,
                color=ax.lines[-1].get_color())
    ax.axhline(slo_p95_ms, color=LIMIT_COLOR, linestyle=":", linewidth=1.2, label=f"p95 target {slo_p95_ms:,.0f} ms")
    _mark_stalls(ax, stalls)
    _time_axis(ax, window)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("TTFT p95 (ms)")
    ax.grid(alpha=0.3)
    hidden = len(series) - len(worst)
    more = f" ({hidden} more instances under these)" if hidden > 0 else ""
    ax.set_title(f"When did TTFT leave its target? p95 per minute and instance{more}", loc="left", fontsize=11)
    _legend_outside(ax)
    return _save(fig, path)


def token_timelines(timelines: list[tuple[dict[str, Any], list[dict[str, Any]]]], path: Path) -> Path:
    """Where did the stream stop? Tokens received over time per request, its longest gap shaded and labelled."""
    fig, axes = plt.subplots(len(timelines), 1, figsize=(WIDTH_IN, 1.9 * len(timelines) + 0.8), squeeze=False)
    for ax, (request, tokens) in zip(axes[:, 0], timelines, strict=True):
        times = [t["at"] for t in tokens]
        ax.step(times, [t["token_index"] + 1 for t in tokens], where="post", color="#4e79a7", linewidth=1.5)
        worst = max(tokens[1:], key=lambda t: t["gap_ms"], default=None)
        if worst is not None and worst["gap_ms"] > 0:
            gap_start = worst["at"] - dt.timedelta(milliseconds=worst["gap_ms"])
            ax.axvspan(gap_start, worst["at"], color=STALL_COLOR, alpha=0.18)
            middle = gap_start + (worst["at"] - gap_start) / 2
            # label inside the band, at the top: the line runs along the band's lower half
            ax.text(middle, 0.92, f"{worst['gap_ms']:,.0f} ms without a token", color=STALL_COLOR, fontsize=9,
                    ha="center", va="top", transform=blended_transform_factory(ax.transData, ax.transAxes),
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
        ax.set_ylim(0, len(tokens) * 1.25 + 1)
        span = (times[-1] - times[0]).total_seconds() if len(times) > 1 else 1.0
        pad = dt.timedelta(seconds=max(span * 0.03, 0.01))
        _time_axis(ax, (times[0] - pad, times[-1] + pad))
        ax.set_ylabel("tokens")
        ttft = request["ttft_ms"]
        ax.set_title(f"trace {request['trace_id']} on {request['instance'] or '?'} · "
                     f"TTFT {'-' if ttft is None else f'{ttft:,.0f} ms'} · {len(tokens)} tokens",
                     loc="left", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle("Where did the stream stop? Tokens received over time (red: the longest gap)", x=0.01,
                 ha="left", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def neighbors_gantt(instance: str, stall: tuple[dt.datetime, float], rows: list[dict[str, Any]],
                    path: Path) -> Path:
    """What else ran on the instance during the stall? Each request's queue, prefill and decode as bars."""
    at, gap_ms = stall
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.42 * len(rows) + 1.8))
    labels, ends = [], []
    for y, row in enumerate(rows):
        start = row["started"]
        ttft = row["ttft_ms"] if row["ttft_ms"] is not None else row["e2e_ms"]
        prefill_from = row.get("prefill_from_ms")
        if prefill_from is not None:  # the trace says when its prefill began: queued (gateway, engine) until then
            before = (("queued", 0.0, prefill_from), ("prefill", prefill_from, max(ttft - prefill_from, 0.0)))
        else:  # a gateway's span alone: its own queue, then the engine's queue or prefill, it cannot tell which
            queue = row["queue_ms"] or 0.0
            before = (("queued", 0.0, queue), ("awaiting first token", queue, max(ttft - queue, 0.0)))
        segments = (*before, ("decode", ttft, max(row["e2e_ms"] - ttft, 0.0)))
        for phase, offset, length in segments:
            if length > 0:
                ax.barh(y, dt.timedelta(milliseconds=length), left=start + dt.timedelta(milliseconds=offset),
                        color=PHASE_COLORS[phase], label=phase, height=0.6, zorder=2)
        ends.append(start + dt.timedelta(milliseconds=row["e2e_ms"]))
        cached = f"{row['cached_tokens']:,} cached" if row["cached_tokens"] else "no cached prefix"
        labels.append(f"{row['trace_id'][:8]}  {row['prompt_tokens']:,} prompt tokens, {cached}")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    _mark_stalls(ax, [stall])
    first = min([r["started"] for r in rows] + [at])
    last = max([*ends, at + dt.timedelta(milliseconds=gap_ms)])
    pad = (last - first) * 0.03
    _time_axis(ax, (first - pad, last + pad))
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(f"What else ran on {instance} during the stall at {at:%H:%M:%S.%f}"[:-3] + " UTC?", loc="left",
                 fontsize=11)
    _legend_outside(ax)
    return _save(fig, path)


def attempts_by_instance(rows: list[dict[str, Any]], pools: dict[str, str], path: Path) -> Path:
    """Where did attempts fail? Upstream attempts per instance, failed in red, with their error types."""
    rows = sorted(rows, key=lambda r: (r["failed_attempts"], r["attempts"]))[-12:]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.45 * len(rows) + 1.6))
    ok = [r["attempts"] - r["failed_attempts"] for r in rows]
    failed = [r["failed_attempts"] for r in rows]
    ax.barh(range(len(rows)), failed, color=STALL_COLOR, height=0.6, label="failed")
    ax.barh(range(len(rows)), ok, left=failed, color=OK_COLOR, height=0.6, label="succeeded")
    for y, row in enumerate(rows):
        if row["failed_attempts"]:
            errors = ", ".join(row["errors"]) or "no error.type"
            note = (f"{row['failed_attempts']} of {row['attempts']} failed ({errors}), "
                    f"median {row['failed_median_ms']:,.0f} ms")
            ax.annotate(note, (row["attempts"], y), xytext=(4, 0), textcoords="offset points", va="center",
                        fontsize=8)
    labels = [f"{r['instance'] or '(none)'}" + (f"  ({pools[r['instance']]})" if pools.get(r["instance"]) else "")
              for r in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=9)
    ax.set_xlim(0, max(r["attempts"] for r in rows) * 1.8)
    ax.set_xlabel("upstream attempts in the window")
    ax.grid(alpha=0.3, axis="x")
    ax.set_title("Where did attempts fail? Upstream attempts per instance (pool)", loc="left", fontsize=11)
    _legend_outside(ax)
    return _save(fig, path)


def prometheus_series(title: str, ylabel: str, series: list[tuple[str, list[tuple[dt.datetime, float]]]],
                      stalls: Sequence[tuple[dt.datetime, float]], path: Path,
                      window: tuple[dt.datetime, dt.datetime], limit: tuple[float, str] | None = None,
                      ratio: bool = False) -> Path:
    """One Prometheus query over the window: a line per series, the limit it is judged against, the stalls."""
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
    for label, points in series[:MAX_LINES]:
        # a series with a sample or two (a target scraped only at the window's end) has no line to
        # show: its dots must be big enough to see
        ax.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1.4, marker=".",
                markersize=3 if len(points) > 3 else 9)
    peak = max((v for _, points in series for _, v in points), default=0.0)
    far = limit is not None and not ratio and peak > 0 and limit[0] > 3 * peak
    if limit is not None and not far:
        ax.axhline(limit[0], color=LIMIT_COLOR, linestyle=":", linewidth=1.2, label=limit[1])
    if far:  # drawn, the limit would squash the data into a flat line at the bottom; the legend names it
        ax.plot([], [], color=LIMIT_COLOR, linestyle=":", linewidth=1.2,
                label=f"{limit[1]}\nnot drawn: far above the peak of {peak:,.3g}")
    _mark_stalls(ax, stalls)
    _time_axis(ax, window)
    ax.set_ylim(bottom=0, top=1.05 if ratio else None)
    if ratio:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    hidden = len(series) - MAX_LINES
    ax.set_title(title + (f" ({hidden} more series not drawn)" if hidden > 0 else ""), loc="left", fontsize=11)
    _legend_outside(ax)
    return _save(fig, path)
