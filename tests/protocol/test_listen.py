"""Where the listener lives: Cluster(listen=...), stop/start_broker, pylog.open(listen=...), ``pylog serve``."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import pylog
from pylog.errors import InvalidConfigurationError


def _connects(addr):
    try:
        socket.create_connection(addr, timeout=5).close()
        return True
    except OSError:
        return False


def test_stopped_broker_closes_its_port_and_restart_reuses_it(kcluster):
    addr = kcluster.kafka_server.address_of(1)
    s = socket.create_connection(addr, timeout=5)
    kcluster.stop_broker(1, clean=False)
    s.settimeout(5)
    assert s.recv(1) == b""  # its open connections are closed, as a dead broker's
    s.close()
    assert not _connects(addr)
    kcluster.start_broker(1)
    assert kcluster.kafka_server.address_of(1) == addr and _connects(addr)


def test_listen_argument_checks(tmp_path):
    with pytest.raises(InvalidConfigurationError):
        pylog.Cluster(tmp_path / "a", brokers=1, listen="nonsense")
    with pytest.raises(InvalidConfigurationError):
        pylog.Cluster(tmp_path / "b", brokers=1, seed=1, listen="127.0.0.1:0")
    c = pylog.Cluster(tmp_path / "c", brokers=1, listen="127.0.0.1:0", connections_max_idle_ms=250,
                      socket_request_max_bytes=1000)
    try:
        assert (c.kafka_server.max_idle_s, c.kafka_server.max_request_bytes) == (0.25, 1000)
        port = c.kafka_server.address_of(0)[1]
        with pytest.raises(InvalidConfigurationError):  # the port is taken
            pylog.Cluster(tmp_path / "d", brokers=1, listen=f"127.0.0.1:{port}")
    finally:
        c.close()


def test_pylog_open_listens_in_the_owner(tmp_path):
    from confluent_kafka import Producer

    q = pylog.open(tmp_path / "q", listen="127.0.0.1:0")
    try:
        assert q.role == "owner"
        q.create_topic("jobs")
        p = Producer({"bootstrap.servers": q.bootstrap_servers, "acks": "all"})
        out = []
        p.produce("jobs", b"j0", on_delivery=lambda e, m: out.append((e, m.offset())))
        assert p.flush(30) == 0 and out == [(None, 0)]
        c = q.consumer()
        c.assign([("jobs", 0)])
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = c.poll(timeout=0.5)
        assert [r.value for r in got] == [b"j0"]
        c.close()
        q2 = pylog.open(tmp_path / "q")  # a second opener is a client; it finds the owner's listener
        try:
            assert q2.role == "client" and q2.bootstrap_servers == q.bootstrap_servers
        finally:
            q2.close()
    finally:
        q.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_pylog_serve_foreground_clean_stop(tmp_path, sig):
    from kafka import KafkaProducer

    d = tmp_path / "srv"
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", str(d), "--brokers", "3", "--listen",
                             "127.0.0.1:0", "--replication-factor", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap_servers="), (line, proc.stderr.read() if proc.poll() is not None else "")
        servers = line.split("=", 1)[1]
        assert len(servers.split(",")) == 3
        p = KafkaProducer(bootstrap_servers=servers, acks="all")
        offsets = [p.send("served", f"v{i}".encode()).get(timeout=30).offset for i in range(20)]
        p.close()
        assert offsets == list(range(20))
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "stopped cleanly" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # a clean stop: every broker's logs were closed (Kafka's clean-shutdown marker)
    hosting = [b for b in range(3) if os.path.isdir(os.path.join(d, f"broker-{b}", "served-0"))]
    assert len(hosting) == 2
    assert all(os.path.exists(os.path.join(d, f"broker-{b}", ".kafka_cleanshutdown")) for b in hosting)
    c = pylog.Cluster(d, brokers=3)  # reopens; every acknowledged record is there
    try:
        assert c.store.topics["served"].replication_factor == 2
        assert c.describe("served")[0].high_watermark == 20
    finally:
        c.close()
