"""pylog.metrics: Prometheus text rendering and the windowed rate."""
from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, strategies as st

from pylog.errors import InvalidConfigurationError
from pylog.metrics import HistogramValue, Metric, RateMeter, find, metric, render_prometheus


def test_render_groups_samples_by_name_with_one_help_and_type():
    a = [metric("pylog_x_total", "counter", "X.", 3, topic="t", partition=0)]
    b = [metric("pylog_y", "gauge", "Y.", 1.5), metric("pylog_x_total", "counter", "X.", 4, topic="t", partition=1)]
    text = render_prometheus(a, b)
    assert text == (
        "# HELP pylog_x_total X.\n"
        "# TYPE pylog_x_total counter\n"
        'pylog_x_total{topic="t",partition="0"} 3\n'
        'pylog_x_total{topic="t",partition="1"} 4\n'
        "# HELP pylog_y Y.\n"
        "# TYPE pylog_y gauge\n"
        "pylog_y 1.5\n"
    )


def test_render_escapes_label_values_and_help():
    text = render_prometheus([metric("m", "gauge", "a\\b\nc", 1, v='q"\\\n')])
    assert "# HELP m a\\\\b\\nc\n" in text
    assert 'm{v="q\\"\\\\\\n"} 1\n' in text


def test_special_values():
    text = render_prometheus([metric("a", "gauge", "", math.nan), metric("b", "gauge", "", math.inf),
                              metric("c", "gauge", "", -math.inf), metric("d", "gauge", "", True),
                              metric("e", "gauge", "", 2.0), metric("f", "gauge", "", 0.25)])
    assert text.splitlines()[2::3] == ["a NaN", "b +Inf", "c -Inf", "d 1", "e 2", "f 0.25"]


def test_empty_renders_empty():
    assert render_prometheus([]) == ""


@pytest.mark.parametrize("bad", [
    [Metric("1bad", "gauge", "", 1)],
    [Metric("ok", "histogram", "", 1)],
    [Metric("ok", "gauge", "", HistogramValue(((math.inf, 1),), 1.0, 1))],  # was a bare TypeError
    [Metric("ok", "gauge", "", 1, (("__reserved", "x"),))],
    [Metric("ok", "gauge", "", 1, (("bad-label", "x"),))],
    [Metric("ok", "gauge", "", 1), Metric("ok", "counter", "", 1)],
    [Metric("ok", "gauge", "", 1, (("a", "1"),)), Metric("ok", "gauge", "", 2, (("a", "1"),))],
])
def test_render_refuses_what_prometheus_would_reject(bad):
    with pytest.raises(InvalidConfigurationError):
        render_prometheus(bad)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def _parse(text):
    """A small parser of the exposition format: {(name, labels): value}."""
    out = {}
    for line in text.split("\n"):
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, line
        labels = tuple(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        labels = tuple((k, re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), v)) for k, v in labels)
        out[(m.group(1), labels)] = float(m.group(3))
    return out


@given(st.dictionaries(st.text(min_size=0, max_size=8), st.integers(-10**9, 10**9), max_size=6))
def test_render_round_trips_label_values(values):
    ms = [metric("pylog_v", "gauge", "v", v, key=k) for k, v in values.items()]
    parsed = _parse(render_prometheus(ms))
    assert parsed == {("pylog_v", (("key", k),)): float(v) for k, v in values.items()}


def test_find():
    ms = [metric("n", "gauge", "", 1, p=0), metric("n", "gauge", "", 2, p=1)]
    assert find(ms, "n", p=1) == 2
    with pytest.raises(KeyError):
        find(ms, "n")
    with pytest.raises(KeyError):
        find(ms, "missing")


def test_rate_meter_window():
    r = RateMeter(window_ms=1000, samples=2)
    assert r.rate(0) == 0.0
    r.record(0, 500)
    assert r.rate(100) == 500.0  # divided by one whole window, not 100 ms
    r.record(1500, 500)
    assert r.rate(1999) == pytest.approx(1000 * 1000 / 1999)
    # At 2000 the first window (start 0) has left the 2-window horizon.
    assert r.rate(2000) == pytest.approx(500.0)
    assert r.rate(10_000) == 0.0
    assert r.total == 1000


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 100)), max_size=40))
def test_rate_meter_matches_a_model(events):
    """Against a model: events in windows whose start is within samples*window of now."""
    r = RateMeter(window_ms=10, samples=3)
    now = 0
    log = []
    for dt, n in events:
        now += dt
        r.record(now, n)
        log.append((now, n))
        live = [(t - t % 10, c) for t, c in log if (t - t % 10) > now - 30]
        expected = 0.0
        if live:
            oldest = min(s for s, _ in live)
            expected = sum(c for _, c in live) * 1000.0 / max(now - oldest, 10)
        assert r.rate(now) == pytest.approx(expected)


def test_log_append_rates_follow_the_log_clock(tmp_path):
    """Log.metrics(): windowed append rates from the log's own clock (records and bytes)."""
    import pylog

    now = [1_000_000]
    log = pylog.Log.open(str(tmp_path / "t-0"), clock_ms=lambda: now[0])
    try:
        assert find(log.metrics(), "pylog_log_append_records_rate") == 0.0
        res = log.append([b"x" * 100] * 300)
        assert res.last_offset == 299
        now[0] += 10_000  # 300 records within one 30 s window, 10 s later: divided by the whole window
        assert find(log.metrics(), "pylog_log_append_records_rate") == 300 / 30
        appended = find(log.metrics(), "pylog_log_appended_bytes_total")
        assert appended > 300 * 100
        assert find(log.metrics(), "pylog_log_append_bytes_rate") == appended / 30
        now[0] += 120_000  # two windows later nothing is left
        assert find(log.metrics(), "pylog_log_append_records_rate") == 0.0
        assert find(log.metrics(), "pylog_log_appended_records_total") == 300
    finally:
        log.close()
