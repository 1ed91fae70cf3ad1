"""``pylog sim --plot``: draw a :class:`~pylog.simulation.trace.Trace` as a PNG (needs matplotlib, the ``plot`` extra).

matplotlib is imported inside :func:`plot_trace` only: importing this module needs nothing.

Thread-safety: matplotlib's pyplot is not thread-safe; draw from one thread.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

from pylog.errors import InvalidConfigurationError
from pylog.simulation.invariants import Violation
from pylog.simulation.trace import Trace

#: Colours per broker (matplotlib's tab10 order) and per fault kind.
_FAULT_COLOURS = {"crash": "#d62728", "stop": "#ff7f0e"}
_EVENT_LINES = {"crash": ("#d62728", "-"), "stop": ("#ff7f0e", "-"), "start": ("#2ca02c", "--")}


def plot_trace(trace: Trace, out_path: str, *, partitions: Optional[Sequence[str]] = None,
               title: str = "", violations: Sequence[Violation] = ()) -> List[str]:
    """Draw ``trace`` to a PNG at ``out_path``; returns the partitions drawn.

    One panel pair per partition: on top each replica's LEO (solid) and HW
    (dashed) as step lines over virtual time, leader changes as vertical lines
    labelled with the new epoch and leader, network partitions shaded; below,
    one band per replica: in the ISR (filled), leader (dark), broker down
    (hatched red for a crash, orange for a clean stop), slowed (marker).

    Needs matplotlib (the ``plot`` extra); raises ImportError without it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    names = list(partitions) if partitions else sorted(trace.partitions, key=partition_sort_key)
    for n in names:
        if n not in trace.partitions:
            raise InvalidConfigurationError(f"no partition {n!r} in the trace; have {', '.join(sorted(trace.partitions))}")
    cmap = plt.get_cmap("tab10")
    assert isinstance(cmap, ListedColormap)  # tab10 is a list of 10 colours
    colours = cast(Sequence[Tuple[float, float, float]], cmap.colors)  # ten RGB tuples (typed ArrayLike)
    end_s = max(trace.end_ms, 1) / 1000.0
    down_spans = _down_spans(trace)
    net_spans = _network_spans(trace)
    slow_spans = _slow_spans(trace)
    n_handles = trace.brokers + 13  # the legend below: brokers, 6 line and 7 patch entries
    legend_h = 0.2 * -(-n_handles // 8)  # inches: one row per 8 entries
    fig_h = 0.85 + legend_h + 4.4 * len(names)
    fig = plt.figure(figsize=(13, fig_h), dpi=100)
    heights: List[float] = []
    for _ in names:
        heights += [3.0, 0.35 * trace.brokers + 0.4]
    gs = fig.add_gridspec(len(heights), 1, height_ratios=heights, hspace=0.12)
    axes = []
    for i, name in enumerate(names):
        pt = trace.partitions[name]
        ax = fig.add_subplot(gs[2 * i])
        band = fig.add_subplot(gs[2 * i + 1], sharex=ax)
        axes.append((ax, band))
        ts = [t / 1000.0 for t in pt.times]
        top = max([v for r in pt.replicas for v in pt.leo[r] if v is not None] or [1])
        for s, e, ev in net_spans:
            ax.axvspan(s, e, color="#9aa5b1", alpha=0.22, lw=0)
            if e - s < end_s * 0.06:
                continue  # too narrow for a label; the band below still shows who was cut off
            label = f"b{ev['broker']} cut off" + (" (one way)" if ev.get("one_way") else "")
            ax.text((s + e) / 2, 0.03, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                    fontsize=7, color="#44505c", clip_on=True)
        # Replicas that agree draw on top of each other: the first replica's line is
        # the widest, so every colour stays visible where the lines coincide.
        widths = [4.2, 2.6, 1.2, 0.8, 0.6]
        for k, r in enumerate(pt.replicas):
            ax.plot(ts, _nan(pt.leo[r]), drawstyle="steps-post", color=colours[r % len(colours)],
                    lw=widths[min(k, len(widths) - 1)], solid_capstyle="butt")
        for k, r in enumerate(pt.replicas):
            ax.plot(ts, _nan(pt.hw[r]), drawstyle="steps-post", color=colours[r % len(colours)], lw=1.1,
                    ls=(0, (3, 2)), alpha=0.95)
        ax.set_ylim(-0.03 * top - 0.5, top * 1.18 + 1)
        for ev in trace.events:
            if ev["kind"] in _EVENT_LINES:
                col, ls = _EVENT_LINES[ev["kind"]]
                ax.axvline(ev["t"] / 1000.0, color=col, lw=1.1, ls=ls, alpha=0.75)
        for lc in trace.leader_changes:
            if lc["tp"] != name:
                continue
            x = lc["t"] / 1000.0
            ax.axvline(x, color="#222222", lw=1.0, ls=":")
            band.axvline(x, color="#222222", lw=1.0, ls=":")
            ax.text(x, 0.985, f"e{lc['epoch']}\u2192b{lc['leader']}", transform=ax.get_xaxis_transform(),
                    rotation=90, va="top", ha="right", fontsize=7.5, color="#111111",
                    bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.8))
        ax.set_ylabel("offset")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{name}   (replicas {', '.join(map(str, pt.replicas))})", loc="left", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        plt.setp(ax.get_xticklabels(), visible=False)
        # ISR / leader / down bands.
        rows = list(pt.replicas)
        for row, r in enumerate(rows):
            y = len(rows) - 1 - row
            rgb = colours[r % len(colours)]
            band.broken_barh(flag_runs(pt.times, [r in isr for isr in pt.isr], trace.end_ms), (y - 0.35, 0.7),
                             facecolors=rgb, alpha=0.45, lw=0)
            band.broken_barh(flag_runs(pt.times, [lead == r for lead in pt.leader], trace.end_ms), (y - 0.35, 0.7),
                             facecolors=rgb, alpha=1.0, lw=0)
            for s, e, kind in down_spans.get(r, []):
                band.broken_barh([(s, max(e - s, end_s * 0.004))], (y - 0.42, 0.84), facecolors="none",
                                 edgecolors=_FAULT_COLOURS[kind], hatch="//", lw=0.8)
            for s, e, ev in net_spans:
                if ev["broker"] == r:
                    band.broken_barh([(s, e - s)], (y - 0.5, 0.13), facecolors="#44505c", lw=0)
            for s, e in slow_spans.get(r, []):
                band.broken_barh([(s, e - s)], (y + 0.37, 0.13), facecolors="#8c564b", lw=0)
        band.set_yticks(range(len(rows)))
        band.set_yticklabels([f"b{r}" for r in reversed(rows)], fontsize=8)
        band.set_ylim(-0.6, len(rows) - 0.4)
        band.set_xlim(0, end_s)
        ax.set_xlim(0, end_s)
        band.set_ylabel("ISR", fontsize=8)
        if i < len(names) - 1:
            plt.setp(band.get_xticklabels(), visible=False)
        else:
            band.set_xlabel("virtual time (s)")
    by_time: Dict[int, List[str]] = {}
    for v in violations:
        by_time.setdefault(v.t_ms, []).append(v.invariant)
    for k, (t_ms, invs) in enumerate(sorted(by_time.items())):
        for ax, band in axes:
            ax.axvline(t_ms / 1000.0, color="#d62728", lw=2.2)
            band.axvline(t_ms / 1000.0, color="#d62728", lw=2.2)
        ax0 = axes[0][0]
        ax0.text(t_ms / 1000.0, 0.90 - 0.09 * (k % 5), f" FAIL {', '.join(invs)} (t={t_ms / 1000:.3f}s)",
                 transform=ax0.get_xaxis_transform(), color="#d62728", fontsize=8, ha="left", va="top",
                 bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="#d62728", alpha=0.9))
    settle = [ev["t"] for ev in trace.events if ev["kind"] == "settle"]
    if settle:
        for ax, band in axes:
            ax.axvspan(settle[0] / 1000.0, end_s, color="#2ca02c", alpha=0.06, lw=0)
            ax.text(settle[0] / 1000.0, 0.5, " settle: heal, restart all, read back", transform=ax.get_xaxis_transform(),
                    fontsize=7, color="#2c6e2c", rotation=90, va="center", ha="left")
    handles: List[Artist] = [Line2D([], [], color=colours[r % len(colours)], lw=2.5, label=f"broker {r}")
               for r in range(trace.brokers)]
    handles += [
        Line2D([], [], color="#555555", lw=2.2, label="log end offset"),
        Line2D([], [], color="#555555", lw=1.1, ls=(0, (3, 2)), label="high watermark"),
        Line2D([], [], color="#222222", lw=1.0, ls=":", label="leader change (epoch\u2192broker)"),
        Line2D([], [], color="#d62728", lw=1.1, label="crash"),
        Line2D([], [], color="#ff7f0e", lw=1.1, label="clean stop"),
        Line2D([], [], color="#2ca02c", lw=1.1, ls="--", label="restart"),
        Patch(facecolor="#9aa5b1", alpha=0.35, label="network partition"),
        Patch(facecolor="#888888", alpha=0.45, label="in ISR"),
        Patch(facecolor="#888888", alpha=1.0, label="leader"),
        Patch(facecolor="white", edgecolor=_FAULT_COLOURS["crash"], hatch="//", label="down (crash)"),
        Patch(facecolor="white", edgecolor=_FAULT_COLOURS["stop"], hatch="//", label="down (clean stop)"),
        Patch(facecolor="#44505c", label="cut off (band bottom)"),
        Patch(facecolor="#8c564b", label="slowed (band top)"),
    ]
    fig.legend(handles=handles, loc="upper center", ncol=8, fontsize=8.5, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.25 / fig_h))
    if title:
        fig.suptitle(title, y=1 - 0.02 / fig_h, fontsize=11)
    fig.subplots_adjust(left=0.06, right=0.99, top=1 - (0.55 + legend_h) / fig_h, bottom=0.55 / fig_h)
    fig.savefig(out_path, format="png")
    plt.close(fig)
    return names


def partition_sort_key(name: str) -> Tuple[str, int]:
    """``"orders-10"`` -> ``("orders", 10)``: partitions in numeric order."""
    topic, _, p = name.rpartition("-")
    return (topic, int(p)) if p.isdigit() else (name, -1)


def _nan(values: Sequence[Optional[int]]) -> List[float]:
    return [float("nan") if v is None else float(v) for v in values]


def flag_runs(times: Sequence[int], flags: Sequence[bool], end_ms: int) -> List[Tuple[float, float]]:
    """(start s, width s) of each run of True flags, each sample holding until the next."""
    out: List[Tuple[float, float]] = []
    start: Optional[int] = None
    for i, (t, f) in enumerate(zip(times, flags)):
        if f and start is None:
            start = t
        elif not f and start is not None:
            out.append((start / 1000.0, (t - start) / 1000.0))
            start = None
    if start is not None:
        out.append((start / 1000.0, (max(end_ms, start) - start) / 1000.0))
    return out


def _down_spans(trace: Trace) -> Dict[int, List[Tuple[float, float, str]]]:
    """broker -> [(start s, end s, "crash"|"stop")] from the stop/crash and start events."""
    open_: Dict[int, Tuple[int, str]] = {}
    out: Dict[int, List[Tuple[float, float, str]]] = {}
    for ev in trace.events:
        if ev["kind"] in ("crash", "stop"):
            open_[ev["broker"]] = (ev["t"], ev["kind"])
        elif ev["kind"] == "start" and ev["broker"] in open_:
            t, kind = open_.pop(ev["broker"])
            out.setdefault(ev["broker"], []).append((t / 1000.0, ev["t"] / 1000.0, kind))
    for b, (t, kind) in open_.items():
        out.setdefault(b, []).append((t / 1000.0, trace.end_ms / 1000.0, kind))
    return out


def _slow_spans(trace: Trace) -> Dict[int, List[Tuple[float, float]]]:
    """broker -> [(start s, end s)] while its messages were delayed."""
    since: Dict[int, int] = {}
    out: Dict[int, List[Tuple[float, float]]] = {}
    for ev in trace.events:
        if ev["kind"] == "slow" or (ev["kind"] == "settle"):
            brokers = [ev["broker"]] if ev["kind"] == "slow" else list(since)
            for b in brokers:
                if b in since:
                    out.setdefault(b, []).append((since.pop(b) / 1000.0, ev["t"] / 1000.0))
            if ev["kind"] == "slow" and ev["extra_ms"] > 0:
                since[ev["broker"]] = ev["t"]
    for b, t in since.items():
        out.setdefault(b, []).append((t / 1000.0, trace.end_ms / 1000.0))
    return out


def _network_spans(trace: Trace) -> List[Tuple[float, float, Dict[str, Any]]]:
    out: List[Tuple[float, float, Dict[str, Any]]] = []
    cur: Optional[Dict[str, Any]] = None
    for ev in trace.events:
        if ev["kind"] == "partition" and cur is None:
            cur = ev
        elif ev["kind"] == "heal" and cur is not None:
            out.append((cur["t"] / 1000.0, ev["t"] / 1000.0, cur))
            cur = None
    if cur is not None:
        out.append((cur["t"] / 1000.0, trace.end_ms / 1000.0, cur))
    return out
