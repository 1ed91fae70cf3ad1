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

Latency is a ``histogram`` sample whose value is a :class:`HistogramValue`
(cumulative bucket counts, sum and count), rendered as Prometheus'
``_bucket``/``_sum``/``_count`` lines; :class:`Histogram` records one.

A cluster's ``metrics()`` already holds its clients' samples, so
``render_prometheus(cluster.metrics(), producer.metrics())`` would name the
producer's samples twice: a sample repeated in a *later* list (same name and
labels) is rendered once, from the first list that has it. Two samples with
the same name and labels inside *one* list are a bug and raise.

:class:`PylogCollector` hands the same samples to ``prometheus_client``
(the ``metrics`` extra: ``pip install 'pylog-kafka[metrics]'``);
:func:`serve_metrics` serves ``/metrics`` on loopback with the standard
library alone.

Counters count from when the object was created (a reopened log starts at
zero, as a restarted Kafka broker does); Prometheus' ``rate()`` turns them
into rates. :class:`RateMeter` gives the in-process windowed rate that
Kafka's own metrics report (``*-rate``).

Thread-safety: :class:`Metric` is immutable; :class:`RateMeter` and
:class:`Histogram` are not locked (each component updates them on its own
thread; a snapshot taken from another thread may miss the observation being
made, never corrupts). :func:`serve_metrics` answers on its own thread.
"""
from __future__ import annotations

import math
import re
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from pylog.errors import InvalidConfigurationError

Labels = Tuple[Tuple[str, str], ...]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
KINDS = ("counter", "gauge", "histogram")

#: latency bucket upper bounds in seconds (as prometheus_client's defaults, extended to 30 s for failovers)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class HistogramValue(NamedTuple):
    """A histogram sample's value: ``buckets`` as ``(upper bound, cumulative count)`` ending with
    ``(inf, count)``, the ``sum`` of observations and their ``count``."""

    buckets: Tuple[Tuple[float, int], ...]
    sum: float
    count: int  # type: ignore[assignment]  # the field shadows tuple.count on purpose (Prometheus' name)


class Histogram:
    """Observations counted into fixed buckets (Prometheus' histogram), e.g. latencies in seconds.

    Complexity: O(log buckets) per :meth:`observe`, O(buckets) per :meth:`snapshot`.
    Thread-safety: see the module docstring (one writer thread).

    >>> h = Histogram((0.1, 1.0)); h.observe(0.05); h.observe(0.5); h.observe(7)
    >>> h.snapshot()
    HistogramValue(buckets=((0.1, 1), (1.0, 2), (inf, 3)), sum=7.55, count=3)
    """

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS):
        b = tuple(float(x) for x in bounds)
        if not b or any(y <= x for x, y in zip(b, b[1:])) or any(math.isnan(x) for x in b):
            raise InvalidConfigurationError(f"histogram bounds must be increasing numbers, got {bounds!r}")
        self.bounds = b if math.isinf(b[-1]) else b + (math.inf,)
        self._counts = [0] * len(self.bounds)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation (negative values, from a clock step, count as 0)."""
        import bisect

        v = max(0.0, float(value))
        self._counts[bisect.bisect_left(self.bounds, v)] += 1
        self._sum += v

    def snapshot(self) -> HistogramValue:
        counts = list(self._counts)
        total = 0
        out = []
        for bound, n in zip(self.bounds, counts):
            total += n
            out.append((bound, total))
        return HistogramValue(tuple(out), round(self._sum, 9), total)


class Metric(NamedTuple):
    """One sample: ``name{labels} value`` with its kind and help text."""

    name: str
    kind: str
    help: str
    value: "float | HistogramValue"
    labels: Labels = ()

    def label(self, key: str) -> Optional[str]:
        """The value of label ``key``, or None."""
        for k, v in self.labels:
            if k == key:
                return v
        return None


def metric(name: str, kind: str, help: str, value: "float | HistogramValue", **labels: object) -> Metric:
    """Build a :class:`Metric`, label values turned to ``str`` in keyword order."""
    return Metric(name, kind, help, value, tuple((k, str(v)) for k, v in labels.items()))


def find(metrics: Iterable[Metric], name: str, **labels: object) -> "float | HistogramValue":
    """The value of the one sample named ``name`` whose labels include ``labels`` (a
    :class:`HistogramValue` for a histogram).

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
    in the input. A sample whose name and labels already came in an earlier
    list is skipped (``cluster.metrics()`` includes its clients, so
    rendering it with ``producer.metrics()`` repeats them). A name with two
    kinds, an invalid metric or label name, or two samples with the same
    name and labels in one list raise
    :class:`~pylog.errors.InvalidConfigurationError` (Prometheus would reject
    the page). Complexity: O(samples).
    """
    groups = _group(metric_lists)
    out: List[str] = []
    for name, samples in groups.items():
        out.append(f"# HELP {name} {_escape_help(samples[0].help)}")
        out.append(f"# TYPE {name} {samples[0].kind}")
        for m in samples:
            if m.kind == "histogram":
                out.extend(_histogram_lines(m))
                continue
            value = m.value
            if isinstance(value, HistogramValue):
                raise InvalidConfigurationError(f"metric {m.name}: a {m.kind} sample holds a histogram's value")
            labels = _label_text(m.labels)
            out.append(f"{name}{{{labels}}} {_format_value(value)}" if labels else f"{name} {_format_value(value)}")
    return "\n".join(out) + ("\n" if out else "")


def _label_text(labels: Labels) -> str:
    return ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)


def _histogram_lines(m: Metric) -> Iterator[str]:
    v = m.value
    if not isinstance(v, HistogramValue):
        raise InvalidConfigurationError(f"metric {m.name}: a histogram's value must be a HistogramValue, got {v!r}")
    for bound, n in v.buckets:
        le = "+Inf" if math.isinf(bound) else _format_value(bound)
        yield f"{m.name}_bucket{{{_label_text(m.labels + (('le', le),))}}} {n}"
    labels = _label_text(m.labels)
    suffix = f"{{{labels}}}" if labels else ""
    yield f"{m.name}_sum{suffix} {_format_value(v.sum)}"
    yield f"{m.name}_count{suffix} {v.count}"


def _group(metric_lists: Sequence[Iterable[Metric]]) -> Dict[str, List[Metric]]:
    """Samples by name (first-seen order), checked; a sample repeated in a later list is dropped."""
    groups: Dict[str, List[Metric]] = {}
    owner: Dict[Tuple[str, Labels], int] = {}
    for index, metrics in enumerate(metric_lists):
        for m in metrics:
            if not _NAME.match(m.name):
                raise InvalidConfigurationError(f"invalid metric name {m.name!r}")
            if m.kind not in KINDS:
                raise InvalidConfigurationError(f"metric {m.name}: kind must be one of {KINDS}, got {m.kind!r}")
            for k, _ in m.labels:
                if not _LABEL.match(k) or k.startswith("__"):
                    raise InvalidConfigurationError(f"metric {m.name}: invalid label name {k!r}")
            if m.kind == "histogram" and any(k == "le" for k, _ in m.labels):
                raise InvalidConfigurationError(f"metric {m.name}: a histogram cannot have a label named 'le'")
            group = groups.setdefault(m.name, [])
            if group and group[0].kind != m.kind:
                raise InvalidConfigurationError(f"metric {m.name} is both a {group[0].kind} and a {m.kind}")
            key = (m.name, m.labels)
            first = owner.get(key)
            if first is not None:
                if first == index:
                    hint = " (two clients with the same client_id?)" if m.label("client_id") is not None else ""
                    raise InvalidConfigurationError(
                        f"metric {m.name} has two samples with labels {dict(m.labels)}{hint}")
                continue  # the same object rendered twice (a cluster's list holds its clients' samples)
            owner[key] = index
            group.append(m)
    return groups


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


Source = Union[Callable[[], Iterable[Metric]], Any]


def _collect(sources: Sequence[Source]) -> List[List[Metric]]:
    """Each source's samples: an object with ``metrics()`` or a callable returning samples."""
    out = []
    for src in sources:
        fn = getattr(src, "metrics", None)
        if fn is None and callable(src):
            fn = src
        if fn is None:
            raise InvalidConfigurationError(f"a metrics source needs a metrics() method or must be callable: {src!r}")
        out.append(list(fn()))
    return out


class PylogCollector:
    """A ``prometheus_client`` collector over pylog objects (the ``metrics`` extra).

    ``sources``: objects with ``metrics()`` (a Cluster, Producer, Consumer,
    Log) or callables returning samples, read on every scrape::

        from prometheus_client import REGISTRY, start_http_server
        REGISTRY.register(PylogCollector(cluster))
        start_http_server(9400, addr="127.0.0.1")

    The same rules as :func:`render_prometheus` apply (a sample repeated in
    a later source is dropped). Complexity: O(samples) per scrape.
    Thread-safety: ``collect`` may run on any thread (the sources' own
    ``metrics()`` are thread-safe).
    """

    def __init__(self, *sources: Source):
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            raise InvalidConfigurationError(
                "PylogCollector needs prometheus_client: pip install 'pylog-kafka[metrics]'") from None
        self.sources = sources

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        for name, samples in _group(_collect(self.sources)).items():
            kind, help_ = samples[0].kind, samples[0].help
            label_names = [k for k, _ in samples[0].labels]
            if kind == "counter":
                fam: Any = CounterMetricFamily(name, help_, labels=label_names)
            elif kind == "gauge":
                fam = GaugeMetricFamily(name, help_, labels=label_names)
            else:
                fam = HistogramMetricFamily(name, help_, labels=label_names)
            for m in samples:
                if [k for k, _ in m.labels] != label_names:
                    raise InvalidConfigurationError(f"metric {name}: samples with different label names")
                values = [v for _, v in m.labels]
                if kind == "histogram":
                    hv = m.value
                    if not isinstance(hv, HistogramValue):
                        raise InvalidConfigurationError(f"metric {name}: a histogram's value must be a "
                                                        f"HistogramValue, got {hv!r}")
                    fam.add_metric(values, [("+Inf" if math.isinf(b) else repr(float(b)), n) for b, n in hv.buckets],
                                   hv.sum)
                elif isinstance(m.value, HistogramValue):
                    raise InvalidConfigurationError(f"metric {name}: a {kind} sample holds a histogram's value")
                else:
                    fam.add_metric(values, float(m.value))
            yield fam


class MetricsServer:
    """What :func:`serve_metrics` returns: ``port`` (the bound one), ``url``, ``close()``; a context manager."""

    def __init__(self, server: Any, thread: threading.Thread):
        self._server = server
        self._thread = thread
        self.host, self.port = server.server_address[:2]
        self.url = f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop answering and join the server thread (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(port: int, *sources: Source, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``GET /metrics`` (Prometheus text format 0.0.4) for ``sources`` on ``host:port``.

    Loopback by default: pylog's metrics name topics and groups, so putting
    them on a public interface is a decision for the caller (``host=``).
    ``port=0`` picks a free port (read it back from ``.port``). Each scrape
    calls every source's ``metrics()`` and :func:`render_prometheus`; a
    source that raises answers 500 with the error. Standard library only.
    Thread-safety: the server runs on its own daemon thread; ``close()``
    from any thread.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise InvalidConfigurationError(f"serve_metrics port must be an int in 0..65535, got {port!r}")
    _collect(sources)  # a source without metrics() is refused now, not at the first scrape

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics")
                return
            try:
                body = render_prometheus(*_collect(sources)).encode("utf-8")
                status = 200
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            except Exception as exc:  # noqa: BLE001 - the scrape reports it, the server lives on
                body = f"{type(exc).__name__}: {exc}\n".encode("utf-8")
                status = 500
                ctype = "text/plain; charset=utf-8"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="pylog-metrics", daemon=True)
    thread.start()
    return MetricsServer(server, thread)


__all__ = ["Metric", "metric", "find", "render_prometheus", "RateMeter", "Histogram", "HistogramValue",
           "LATENCY_BUCKETS", "PylogCollector", "serve_metrics", "MetricsServer"]
