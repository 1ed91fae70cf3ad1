"""Metrics as Prometheus sees them (issue 19, item 6): the README's recipe renders a cluster with its clients
without duplicates, latency histograms, the consumer's client_id label, the prometheus_client collector and
serve_metrics on loopback - each page parsed with prometheus_client's own parser."""
from __future__ import annotations

import math
import urllib.error
import urllib.request

import pytest

import pylog
from pylog.errors import InvalidConfigurationError
from pylog.metrics import Histogram, HistogramValue, Metric, PylogCollector, find, render_prometheus, serve_metrics

parser = pytest.importorskip("prometheus_client.parser")


def parse(text: str) -> dict:
    """``{(sample name, frozenset(labels)): value}``, failing on a sample named twice."""
    out = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out


@pytest.fixture
def busy_cluster(tmp_path):
    """A simulated cluster with a producer that sent 5 records and a consumer that read them."""
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=11)
    try:
        c.create_topic("orders", partitions=2, replication_factor=3, min_insync_replicas=2)
        producer = c.producer(acks="all")
        for i in range(5):
            producer.send("orders", b"v%d" % i, key=b"k%d" % i).result()
        consumer = c.consumer(group_id="billing", topics=["orders"], client_id="biller",
                              auto_offset_reset="earliest")
        got = []
        while len(got) < 5:
            got += consumer.poll(timeout=1.0)
        yield c, producer, consumer
    finally:
        c.close()


def test_readme_recipe_renders_a_cluster_with_its_clients(busy_cluster):
    cluster, producer, consumer = busy_cluster
    text = render_prometheus(cluster.metrics(), producer.metrics(), consumer.metrics())  # raised before the fix
    samples = parse(text)
    pcid = producer.metrics()[0].label("client_id")
    assert samples[("pylog_producer_records_sent_total", frozenset({("client_id", pcid)}))] == 5
    assert samples[("pylog_consumer_records_consumed_total",
                    frozenset({("client_id", "biller"), ("group", "billing")}))] == 5
    # The same page as the cluster alone renders (the clients' samples came once, from the cluster's list).
    assert parse(render_prometheus(cluster.metrics())).keys() == samples.keys()


def test_one_list_naming_a_sample_twice_is_still_an_error():
    m = Metric("x_total", "counter", "X.", 1, (("client_id", "a"),))
    with pytest.raises(InvalidConfigurationError, match="two samples with labels .* same client_id"):
        render_prometheus([m, m._replace(value=2)])
    assert render_prometheus([m], [m._replace(value=2)]).endswith('x_total{client_id="a"} 1\n')  # first list wins


def test_produce_and_fetch_latency_histograms(busy_cluster):
    cluster, producer, consumer = busy_cluster
    pcid = producer.metrics()[0].label("client_id")
    samples = parse(render_prometheus(cluster.metrics()))
    lab = frozenset({("client_id", pcid)})
    count = samples[("pylog_producer_send_latency_seconds_count", lab)]
    assert count == producer.batches_sent == 5  # one batch per synchronous send, each acknowledged
    buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in samples.items()
                      if k[0] == "pylog_producer_send_latency_seconds_bucket" and ("client_id", pcid) in k[1]))
    assert buckets[-1] == (math.inf, count)
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))  # cumulative
    assert samples[("pylog_producer_send_latency_seconds_sum", lab)] > 0  # simulated network latency is >= 1 ms
    clab = frozenset({("client_id", "biller"), ("group", "billing")})
    assert samples[("pylog_consumer_fetch_latency_seconds_count", clab)] >= 1
    assert samples[("pylog_consumer_fetch_latency_seconds_count", clab)] <= consumer.fetch_requests


def test_consumer_client_id_is_its_label_and_twins_are_named_in_the_error(busy_cluster):
    cluster, _, consumer = busy_cluster
    assert {m.label("client_id") for m in consumer.metrics()} == {"biller"}
    anonymous = cluster.consumer(group_id=None)
    assert anonymous.metrics()[0].label("client_id") not in ("biller", "pylog-consumer")  # unique node id
    cluster.consumer(group_id="billing", topics=["orders"], client_id="biller")  # a twin
    with pytest.raises(InvalidConfigurationError, match="same client_id"):
        render_prometheus(cluster.metrics())


def test_histogram_rules():
    h = Histogram((0.01, 0.1))
    for v in (0.005, 0.05, 0.05, 3, -1):
        h.observe(v)
    assert h.snapshot() == HistogramValue(((0.01, 2), (0.1, 4), (math.inf, 5)), 3.105, 5)
    text = render_prometheus([Metric("lat_seconds", "histogram", "L.", h.snapshot(), (("topic", "t"),))])
    samples = parse(text)
    assert samples[("lat_seconds_bucket", frozenset({("topic", "t"), ("le", "0.1")}))] == 4
    assert samples[("lat_seconds_count", frozenset({("topic", "t")}))] == 5
    for bad in ((), (1.0, 0.5), (float("nan"),)):
        with pytest.raises(InvalidConfigurationError, match="increasing"):
            Histogram(bad)
    with pytest.raises(InvalidConfigurationError, match="HistogramValue"):
        render_prometheus([Metric("lat_seconds", "histogram", "L.", 3)])
    with pytest.raises(InvalidConfigurationError, match="'le'"):
        render_prometheus([Metric("lat_seconds", "histogram", "L.", h.snapshot(), (("le", "x"),))])


def test_prometheus_client_collector(busy_cluster):
    from prometheus_client import CollectorRegistry, generate_latest

    cluster, producer, consumer = busy_cluster
    registry = CollectorRegistry()
    registry.register(PylogCollector(cluster, producer))
    samples = parse(generate_latest(registry).decode())
    pcid = producer.metrics()[0].label("client_id")
    assert samples[("pylog_producer_records_sent_total", frozenset({("client_id", pcid)}))] == 5
    assert samples[("pylog_cluster_brokers_running", frozenset())] == 3
    hw = find(cluster.metrics(), "pylog_partition_high_watermark", topic="orders", partition=0)
    assert samples[("pylog_partition_high_watermark", frozenset({("topic", "orders"), ("partition", "0")}))] == hw
    assert samples[("pylog_producer_send_latency_seconds_count", frozenset({("client_id", pcid)}))] == 5
    with pytest.raises(InvalidConfigurationError, match="metrics\\(\\) method"):
        list(PylogCollector(object()).collect())


def test_serve_metrics_on_loopback(busy_cluster):
    cluster, producer, _ = busy_cluster
    with serve_metrics(0, cluster, producer) as server:
        assert server.host == "127.0.0.1" and server.port > 0
        with urllib.request.urlopen(server.url, timeout=30) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            samples = parse(resp.read().decode())
        assert samples[("pylog_cluster_brokers_running", frozenset())] == 3
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=30)
        assert e.value.code == 404
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=5)  # closed
    with pytest.raises(InvalidConfigurationError, match="port"):
        serve_metrics(70000, cluster)
    with pytest.raises(InvalidConfigurationError, match="metrics\\(\\) method"):
        serve_metrics(0, 42)


@pytest.mark.parametrize("sample", [
    Metric("pylog_x", "histogram", "", 1.0),  # was a bare AttributeError ('float' has no 'buckets')
    Metric("pylog_x", "gauge", "", HistogramValue(((math.inf, 1),), 1.0, 1)),  # was a bare TypeError from float()
])
def test_prometheus_client_collector_refuses_a_value_of_the_wrong_kind(sample):
    with pytest.raises(InvalidConfigurationError, match="pylog_x"):
        list(PylogCollector(lambda: [sample]).collect())
