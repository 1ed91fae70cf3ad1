"""Metrics: plain samples that ``metrics()`` methods return, a windowed rate, and Prometheus text output.

Every component that reports metrics (``Log``, ``Cluster``, ``Producer``,
``Consumer``) has a ``metrics()`` method returning a list of :class:`Metric`:
a name in Prometheus style, its kind (``counter`` or ``gauge``), a help
line, a value and labels such as ``topic`` and ``partition``.
:func:`render_prometheus` turns any number of such lists into the Prometheus
text exposition format (version 0.0.4), ready to serve on ``/metrics``:

>>> print(render_prometheus([Metric("pylog_log_end_offset", "gauge", "Next offset.", 42,
...                                  (("topic", "orders"), ("partition", "0")))]), end="")
# HELP pylog_log_end_offset Next offset.
# TYPE pylog_log_end_offset gauge
pylog_log_end_offset{topic="orders",partition="0"} 42

Counters count from when the object was created (a reopened log starts at
zero, as a restarted Kafka broker does); Prometheus' ``rate()`` turns them
into rates. :class:`RateMeter` gives the in-process windowed rate that
Kafka's own metrics report (``*-rate``).

Thread-safety: :class:`Metric` is immutable; :class:`RateMeter` is not
locked (each component updates its meters on its own thread).
"""
from __future__ import annotations

import math
import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

from pylog.errors import InvalidConfigurationError

Labels = Tuple[Tuple[str, str], ...]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
KINDS = ("counter", "gauge")


class Metric(NamedTuple):
    """One sample: ``name{labels} value`` with its kind and help text."""

    name: str
    kind: str
    help: str
    value: float
    labels: Labels = ()

    def label(self, key: str) -> Optional[str]:
        """The value of label ``key``, or None."""
        for k, v in self.labels:
            if k == key:
                return v
        return None


def metric(name: str, kind: str, help: str, value: float, **labels: object) -> Metric:
    """Build a :class:`Metric`, label values turned to ``str`` in keyword order."""
    return Metric(name, kind, help, value, tuple((k, str(v)) for k, v in labels.items()))


def find(metrics: Iterable[Metric], name: str, **labels: object) -> float:
    """The value of the one sample named ``name`` whose labels include ``labels``.

    Raises ``KeyError`` when none or several match. Complexity: O(len(metrics)).
    """
    want = {k: str(v) for k, v in labels.items()}
    hits = [m for m in metrics if m.name == name and all(m.label(k) == v for k, v in want.items())]
    if len(hits) != 1:
        raise KeyError(f"{len(hits)} samples named {name!r} with labels {want}")
    return hits[0].value


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def render_prometheus(*metric_lists: Iterable[Metric]) -> str:
    """Prometheus text format for every sample, one HELP/TYPE block per name.

    Samples of one name are grouped (in first-seen order) wherever they appear
    in the input. A name with two kinds, an invalid metric or label name, or
    two samples with the same name and labels raise
    :class:`~pylog.errors.InvalidConfigurationError` (Prometheus would reject
    the page). Complexity: O(samples).
    """
    groups: Dict[str, List[Metric]] = {}
    for metrics in metric_lists:
        for m in metrics:
            if not _NAME.match(m.name):
                raise InvalidConfigurationError(f"invalid metric name {m.name!r}")
            if m.kind not in KINDS:
                raise InvalidConfigurationError(f"metric {m.name}: kind must be one of {KINDS}, got {m.kind!r}")
            for k, _ in m.labels:
                if not _LABEL.match(k) or k.startswith("__"):
                    raise InvalidConfigurationError(f"metric {m.name}: invalid label name {k!r}")
            group = groups.setdefault(m.name, [])
            if group and group[0].kind != m.kind:
                raise InvalidConfigurationError(f"metric {m.name} is both a {group[0].kind} and a {m.kind}")
            group.append(m)
    out: List[str] = []
    for name, samples in groups.items():
        out.append(f"# HELP {name} {_escape_help(samples[0].help)}")
        out.append(f"# TYPE {name} {samples[0].kind}")
        seen = set()
        for m in samples:
            if m.labels in seen:
                raise InvalidConfigurationError(f"metric {name} has two samples with labels {dict(m.labels)}")
            seen.add(m.labels)
            labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in m.labels)
            out.append(f"{name}{{{labels}}} {_format_value(m.value)}" if labels else f"{name} {_format_value(m.value)}")
    return "\n".join(out) + ("\n" if out else "")


class RateMeter:
    """Events per second over a sliding window, as Kafka's ``Rate`` with ``SampledStat``.

    Time is split into ``samples`` windows of ``window_ms``; the rate is the
    sum over the windows still inside ``samples * window_ms`` of the clock,
    divided by the time they cover (at least one window, so a burst right
    after start is not divided by ~0 ms).

    Complexity: O(1) per :meth:`record`, O(samples) per :meth:`rate`.
    Thread-safety: none; update and read from one thread.
    """

    def __init__(self, window_ms: int = 30_000, samples: int = 2):
        if window_ms <= 0 or samples <= 0:
            raise InvalidConfigurationError(f"RateMeter window_ms and samples must be positive, got {window_ms}, {samples}")
        self.window_ms = window_ms
        self._starts: List[Optional[int]] = [None] * samples
        self._counts = [0.0] * samples
        self.total = 0.0

    def record(self, now_ms: int, amount: float = 1.0) -> None:
        """Count ``amount`` events at ``now_ms``."""
        start = now_ms - now_ms % self.window_ms
        i = (now_ms // self.window_ms) % len(self._starts)
        if self._starts[i] != start:
            self._starts[i] = start
            self._counts[i] = 0.0
        self._counts[i] += amount
        self.total += amount

    def rate(self, now_ms: int) -> float:
        """Events per second over the live windows at ``now_ms``."""
        horizon = now_ms - len(self._starts) * self.window_ms
        live = [(s, c) for s, c in zip(self._starts, self._counts) if s is not None and horizon < s <= now_ms]
        if not live:
            return 0.0
        oldest = min(s for s, _ in live)
        elapsed = max(now_ms - oldest, self.window_ms)
        return sum(c for _, c in live) * 1000.0 / elapsed


__all__ = ["Metric", "metric", "find", "render_prometheus", "RateMeter"]
