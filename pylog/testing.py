"""pytest plugin: ``pylog_cluster`` (a simulated cluster), ``pylog_cluster_realtime``, and
``pylog_kafka`` (a real-time 3-broker cluster that real Kafka clients connect to) fixtures.

Registered as a ``pytest11`` entry point, so installing pylog is enough::

    def test_orders(pylog_cluster):
        pylog_cluster.create_topic("orders", partitions=3, replication_factor=3, min_insync_replicas=2)
        meta = pylog_cluster.producer(acks="all").send("orders", b"v").result()
        pylog_cluster.stop_broker(pylog_cluster.leader_of("orders", meta.partition), clean=False)

``pylog_cluster`` runs on virtual time (blocking calls advance it), so
failures, timeouts and elections take milliseconds of real time, and a run
is reproducible from its seed: ``--pylog-seed N`` (default 0), or
``@pytest.mark.pylog_seed(n)`` on the test, which wins. A failing test that
used it gets a ``pylog`` section with its seed and a one-line replay command,
repeated in the terminal summary; the report header names the seed, and after
collection the tests whose marker sets another one.

``pylog_cluster_realtime`` is the same cluster in real time (background
threads, wall-clock timeouts), for code that sleeps, uses other threads or
measures time; it has no seed and replays only approximately.

Options, on the command line or per test with ``@pytest.mark.pylog_cluster(...)``:

* ``--pylog-brokers N`` / ``brokers=N`` - brokers in the cluster (default 3);
* ``topics=`` - topics created before the test: a list of names, or a dict of
  name to :meth:`pylog.Cluster.create_topic` keyword arguments;
* ``topic_defaults=`` - keyword arguments every one of those topics starts
  from (default: ``partitions=1``, ``replication_factor=min(3, brokers)``);
* any other keyword goes to :class:`pylog.Cluster` (``session_timeout_ms=``, ...).


``pylog_kafka`` is for code that uses a Kafka client library (kafka-python,
confluent-kafka, aiokafka, ...): point it at ``pylog_kafka.bootstrap_servers``::

    def test_billing(pylog_kafka):
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": pylog_kafka.bootstrap_servers})
        p.produce("orders", b"v"); p.flush()         # acks=all: in the ISR when flush returns
        assert pylog_kafka.describe("orders")[0].high_watermark == 1

It runs in real time on loopback ports (docs/kafka-protocol.md); topics are
auto-created as Kafka does, and ``__consumer_offsets`` has
``PYLOG_KAFKA_OFFSETS_PARTITIONS`` (5) partitions so the first group is
ready in a fraction of a second.

Thread-safety: pytest hooks; one cluster per test, closed after it.
"""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Dict, Generator, Iterator, List, Optional, Tuple

import pytest

if TYPE_CHECKING:
    from pluggy import Result

from pylog.cluster import Cluster
from pylog.errors import InvalidConfigurationError

#: the item attribute where the fixtures leave the seed a test ran with (read by the report hooks)
_SEED_ATTR = "_pylog_seed"
_CLUSTER_OPTIONS = ("brokers", "topics", "topic_defaults")

#: ``__consumer_offsets`` partitions in a ``pylog_kafka`` cluster (Kafka's default 50 takes seconds to create)
PYLOG_KAFKA_OFFSETS_PARTITIONS = 5


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pylog")
    group.addoption("--pylog-seed", type=int, default=0, help="seed of the pylog_cluster fixture's simulation (default 0)")
    group.addoption("--pylog-brokers", type=int, default=3,
                    help="brokers in the pylog_cluster fixtures' clusters (default 3)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pylog_seed(n): seed for the pylog_cluster fixture")
    config.addinivalue_line(
        "markers", "pylog_cluster(brokers=3, topics=None, topic_defaults=None, **cluster_kwargs): "
                   "options of the pylog_cluster / pylog_cluster_realtime fixtures for this test")


# ------------------------------------------------------------------ seeds in the header and in failures


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("--pylog-seed", default=0)
    return (f"pylog: pylog_cluster simulations use seed {seed} (--pylog-seed), "
            f"except tests marked @pytest.mark.pylog_seed(n)")


def _marker_seed(item: pytest.Item) -> Optional[int]:
    marker = item.get_closest_marker("pylog_seed")
    return None if marker is None else int(marker.args[0])


def pytest_report_collectionfinish(config: pytest.Config, items: List[pytest.Item]) -> List[str]:
    """After collection: the tests using ``pylog_cluster`` whose marker sets their own seed."""
    own = [(item.nodeid, seed) for item in items
           if "pylog_cluster" in getattr(item, "fixturenames", ()) and (seed := _marker_seed(item)) is not None]
    if not own:
        return []
    shown = ", ".join(f"{nodeid} seed {seed}" for nodeid, seed in own[:10])
    more = f" and {len(own) - 10} more" if len(own) > 10 else ""
    return [f"pylog: seeds from @pytest.mark.pylog_seed: {shown}{more}"]


def replay_command(item: pytest.Item, seed: int) -> str:
    """One line that runs ``item`` again with ``seed`` (``--pylog-seed`` is left out when a marker sets it)."""
    cmd = ["python", "-m", "pytest", item.nodeid]
    if _marker_seed(item) is None:
        cmd += ["--pylog-seed", str(seed)]
    brokers = item.config.getoption("--pylog-brokers", default=3)
    if brokers != 3:
        cmd += ["--pylog-brokers", str(brokers)]
    return " ".join(shlex.quote(c) for c in cmd)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, "Result[pytest.TestReport]", None]:
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, _SEED_ATTR, None)
    if seed is None or not report.failed:
        return
    line = f"seed {seed}; replay: {replay_command(item, seed)}"
    report.sections.append(("pylog", line))
    failures = item.config.stash.setdefault(_FAILED_KEY, [])
    failures.append((item.nodeid, line))


_FAILED_KEY = pytest.StashKey[List[Tuple[str, str]]]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    failures = config.stash.get(_FAILED_KEY, [])
    if not failures:
        return
    terminalreporter.section("pylog seeds of failed tests")
    for nodeid, line in failures:
        terminalreporter.write_line(f"{nodeid}: {line}")


# ------------------------------------------------------------------ the fixtures


def _options(request: pytest.FixtureRequest) -> Tuple[int, Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """``(brokers, topics, topic_defaults, other Cluster kwargs)`` from the marker and the command line."""
    marker = request.node.get_closest_marker("pylog_cluster")
    kwargs: Dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        raise InvalidConfigurationError(f"{request.node.nodeid}: @pytest.mark.pylog_cluster takes keywords only, "
                                        f"got {marker.args!r}")
    brokers = kwargs.pop("brokers", request.config.getoption("--pylog-brokers", default=3))
    if not isinstance(brokers, int) or isinstance(brokers, bool) or brokers < 1:
        raise InvalidConfigurationError(f"{request.node.nodeid}: pylog_cluster brokers must be a positive int, "
                                        f"got {brokers!r}")
    topics = kwargs.pop("topics", None) or {}
    if isinstance(topics, (list, tuple)):
        topics = {name: {} for name in topics}
    if not isinstance(topics, dict):
        raise InvalidConfigurationError(f"{request.node.nodeid}: pylog_cluster topics must be a list of names or "
                                        f"a dict of name to create_topic options, got {topics!r}")
    defaults = dict(kwargs.pop("topic_defaults", None) or {})
    if "seed" in kwargs:
        raise InvalidConfigurationError(f"{request.node.nodeid}: set the seed with @pytest.mark.pylog_seed(n) "
                                        "or --pylog-seed, not pylog_cluster(seed=...)")
    return brokers, topics, defaults, kwargs


def _make_cluster(request: pytest.FixtureRequest, path: Any, seed: Optional[int]) -> Cluster:
    brokers, topics, defaults, kwargs = _options(request)
    cluster = Cluster(path, brokers=brokers, seed=seed, **kwargs)
    try:
        for name, opts in topics.items():
            merged = {"partitions": 1, "replication_factor": min(3, brokers), **defaults, **(opts or {})}
            cluster.create_topic(name, **merged)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _seed_for(request: pytest.FixtureRequest) -> int:
    seed = _marker_seed(request.node)
    return seed if seed is not None else int(request.config.getoption("--pylog-seed", default=0) or 0)


@pytest.fixture
def pylog_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A simulated :class:`pylog.Cluster` (3 brokers unless configured) in a fresh directory; closed after."""
    seed = _seed_for(request)
    setattr(request.node, _SEED_ATTR, seed)  # before the cluster starts: a failure in set-up names it too
    cluster = _make_cluster(request, tmp_path_factory.mktemp("pylog-cluster"), seed)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pylog_cluster_realtime(request: pytest.FixtureRequest,
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The same cluster in real time (background threads, wall-clock timeouts; no seed); closed after."""
    cluster = _make_cluster(request, tmp_path_factory.mktemp("pylog-cluster-rt"), None)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pylog_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A real-time 3-broker :class:`pylog.Cluster` listening for Kafka clients on 127.0.0.1 (one free
    port per broker; ``.bootstrap_servers``), in a fresh directory; closed after the test."""
    cluster = Cluster(tmp_path_factory.mktemp("pylog-kafka"), brokers=3, listen="127.0.0.1:0")
    cluster.offsets_topic_partitions = PYLOG_KAFKA_OFFSETS_PARTITIONS
    try:
        yield cluster
    finally:
        cluster.close()
