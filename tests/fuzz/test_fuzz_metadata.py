"""A damaged ``cluster-metadata.json`` gives a pylog error naming the file and the field (issue 14, item 7).

It used to raise ``UnicodeDecodeError``, ``JSONDecodeError``, ``KeyError``, ``TypeError`` and
even ``AssertionError`` (139 of 500 damaged cluster directories). The file is now checked field
by field on load (:func:`pylog.replication.controller.load_metadata`): damage raises
:class:`CorruptCheckpointError` naming the file and the field; an intact file of a cluster with
other brokers raises :class:`InvalidConfigurationError`. A damaged file that still loads (a digit
changed in an epoch, say) satisfies every invariant the controller relies on.

The damages: every truncation, a flipped bit at every byte, every field deleted, set to each
wrong type, to negative and huge numbers, an extra key beside every field, broken references
(unknown topic, broker, duplicate partition, leader outside the ISR, ELR in the ISR, epochs out of
range), and hypothesis' random byte edits; a sample reopened as whole clusters.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import random
from typing import Any, Iterator, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog import errors
from pylog.cluster import METADATA_FILE, Cluster
from pylog.replication.controller import Controller, MetadataStore

BROKERS = (0, 1, 2)


def _build(path) -> bytes:
    """A real file: topics with configs, a consumer group's offsets topic, ISR changes, epochs."""
    c = Cluster(path, brokers=3, seed=21)
    try:
        c.create_topic("orders", partitions=2, replication_factor=3, min_insync_replicas=2,
                       config={"cleanup_policy": "compact", "segment_bytes": 1 << 20})
        c.create_topic("logs", partitions=1, replication_factor=2)
        p = c.producer()
        p.send("orders", b"v", key=b"k").result()
        cons = c.consumer("g", ["orders"], fetch_max_wait_ms=50)
        cons.poll(0.5)
        cons.commit()
        cons.close()
        c.stop_broker(1, clean=False)
        c.advance(5_000)
        c.start_broker(1)
        c.advance(3_000)
    finally:
        c.close()
    with open(os.path.join(path, METADATA_FILE), "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> bytes:
    logging.getLogger("pylog").setLevel(logging.CRITICAL)
    return _build(tmp_path_factory.mktemp("meta"))


def _load(path: str, blob: bytes) -> Any:
    """Load ``blob`` as the metadata file; return the store, or the (documented) pylog error."""
    with open(path, "wb") as f:
        f.write(blob)
    try:
        store = MetadataStore(BROKERS, random.Random(0), path=path)
    except errors.CorruptCheckpointError as exc:
        assert path in str(exc) and "cluster metadata" in str(exc), str(exc)
        return exc
    except errors.InvalidConfigurationError as exc:
        assert "created with brokers" in str(exc) and path in str(exc), str(exc)
        return exc
    # Whatever loads satisfies the controller's invariants, and a controller can act on it.
    store._check()
    for st_ in store.partitions.values():
        assert store.topics[st_.topic].partitions > st_.partition
    assert store.try_claim(0, 0, 1_000)
    Controller(0, store, session_timeout_ms=1_000, now_ms=0).activate(0)
    return store


def _paths(node: Any, prefix: Tuple = ()) -> Iterator[Tuple]:
    """Every path to a value in the JSON tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _set(tree: Any, path: Tuple, value: Any) -> Any:
    tree = copy.deepcopy(tree)
    node = tree
    for k in path[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return tree


_DELETE = object()
WRONG = [None, "x", 1.5, True, -1, -(2**40), 2**40, [], {}, [None], {"a": 1}]


def _field_name(path: Tuple) -> str:
    """How the error names a field at ``path`` (e.g. partitions[3].isr)."""
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else k)
    return out


def test_the_original_loads(original, tmp_path):
    store = _load(str(tmp_path / METADATA_FILE), original)
    assert isinstance(store, MetadataStore)
    assert {"orders", "logs", "__consumer_offsets"} <= set(store.topics)


def test_every_truncation(original, tmp_path):
    path = str(tmp_path / METADATA_FILE)
    for n in range(len(original)):
        res = _load(path, original[:n])
        assert isinstance(res, errors.CorruptCheckpointError), (n, res)  # a JSON prefix never parses


def test_a_flipped_bit_at_every_byte(original, tmp_path):
    path = str(tmp_path / METADATA_FILE)
    rng = random.Random(5)
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(len(original)):
        damaged = bytearray(original)
        damaged[i] ^= 1 << rng.randrange(8)
        res = _load(path, bytes(damaged))
        outcomes["loaded" if isinstance(res, MetadataStore) else "refused"] += 1
    assert outcomes["refused"] > len(original) // 2  # most flips are caught


@pytest.mark.parametrize("kind", ["delete", "wrong-type", "extra-key"])
def test_every_field_damaged_structurally(original, tmp_path, kind):
    """Each field deleted / set to each wrong type / given an unknown sibling: refused naming the
    field (or, where the damage is harmless - an optional field removed - loaded consistently)."""
    path = str(tmp_path / METADATA_FILE)
    tree = json.loads(original)
    checked = 0
    for p in _paths(tree):
        if kind == "delete":
            variants = [_set(tree, p, _DELETE)]
        elif kind == "wrong-type":
            variants = [_set(tree, p, w) for w in WRONG]
        else:
            parent = p[:-1]
            node = tree
            for k in parent:
                node = node[k]
            if not isinstance(node, dict):
                continue
            variants = [_set(tree, parent + ("bogus",), 1)]
        for v in variants:
            res = _load(path, json.dumps(v).encode())
            checked += 1
            if isinstance(res, errors.CorruptCheckpointError):
                # names the field, or one on the way to it, or the one its damage broke elsewhere
                assert "cluster metadata field " in str(res), str(res)
    assert checked > 100


@pytest.mark.parametrize("edit, field", [
    (lambda t: t["partitions"][0].__setitem__("topic", "nope"), "partitions[0].topic"),
    (lambda t: t["partitions"][0].__setitem__("partition", 99), "partitions[0].partition"),
    (lambda t: t["partitions"][0].__setitem__("replicas", [0, 0, 1]), "partitions[0].replicas"),
    (lambda t: t["partitions"][0].__setitem__("replicas", [0, 1, 7]), "partitions[0].replicas"),
    (lambda t: t["partitions"][0].__setitem__("isr", []), "partitions[0].isr"),
    (lambda t: t["partitions"][0].__setitem__("isr", [9]), "partitions[0].isr"),
    (lambda t: t["partitions"][0].__setitem__("leader", 9), "partitions[0].leader"),
    (lambda t: t["partitions"][0].__setitem__("leader_epoch", -5), "partitions[0].leader_epoch"),
    (lambda t: t["partitions"][0].__setitem__("partition_epoch", 2**31), "partitions[0].partition_epoch"),
    (lambda t: t["partitions"][0].__setitem__("elr", t["partitions"][0]["isr"][:1]), "partitions[0].elr"),
    (lambda t: t["partitions"].append(copy.deepcopy(t["partitions"][0])), ".partition"),
    (lambda t: t["partitions"].pop(), "is missing"),
    (lambda t: t["topics"][0].__setitem__("replication_factor", 4), "topics[0].replication_factor"),
    (lambda t: t["topics"][0].__setitem__("min_insync_replicas", 0), "topics[0].min_insync_replicas"),
    (lambda t: t["topics"][0].__setitem__("name", "a/b"), "topics[0].name"),
    (lambda t: t["topics"][0].__setitem__("configs", {"segment_bytes": -1}), "topics[0].configs"),
    (lambda t: t["topics"][0].__setitem__("unclean_leader_election", 1), "topics[0].unclean_leader_election"),
    (lambda t: t.__setitem__("controller_epoch", -1), "controller_epoch"),
    (lambda t: t.__setitem__("version", 2), "version"),
    (lambda t: t.__setitem__("version", 1.0), "version"),
    (lambda t: t.__setitem__("next_producer_id", -3), "next_producer_id"),
    (lambda t: t["broker_incarnations"].__setitem__("7", 1), "broker_incarnations.7"),
    (lambda t: t["broker_incarnations"].__setitem__("01", 1), "broker_incarnations.01"),
    (lambda t: t.__setitem__("extra", 1), "extra"),
    (lambda t: t["partitions"][0].__setitem__("extra", 1), "partitions[0].extra"),
    (lambda t: t.pop("topics"), "topics"),
])
def test_a_damaged_field_is_named(original, tmp_path, edit, field):
    tree = json.loads(original)
    edit(tree)
    res = _load(str(tmp_path / METADATA_FILE), json.dumps(tree).encode())
    assert isinstance(res, errors.CorruptCheckpointError) and field in str(res), res


def test_not_utf8_and_not_json(tmp_path):
    path = str(tmp_path / METADATA_FILE)
    for blob, what in [(b"\xff\xfe{}", "not UTF-8"), (b"{", "not JSON"), (b"", "not JSON"), (b"[]", "(top level)"),
                       (b"[" * 100_000, "not JSON"), (b"NaN", "(top level)")]:
        res = _load(path, blob)
        assert isinstance(res, errors.CorruptCheckpointError) and what in str(res), (blob[:10], res)


def test_other_brokers_is_a_configuration_error(original, tmp_path):
    tree = json.loads(original)
    tree["brokers"] = [0, 1, 2, 3]
    res = _load(str(tmp_path / METADATA_FILE), json.dumps(tree).encode())
    assert isinstance(res, errors.InvalidConfigurationError) and not isinstance(res, errors.CorruptCheckpointError)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], max_examples=300,
          deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.sampled_from(["set", "del", "ins"])),
                      min_size=1, max_size=6))
def test_random_byte_edits(original, tmp_path, edits):
    blob = bytearray(original)
    for pos, byte, op in edits:
        i = pos % (len(blob) + 1)
        if op == "ins":
            blob[i:i] = bytes([byte])
        elif i < len(blob):
            if op == "set":
                blob[i] = byte
            else:
                del blob[i]
    _load(str(tmp_path / METADATA_FILE), bytes(blob))  # asserts the documented classes only


def test_damaged_cluster_directories_reopen_or_raise_pylog_errors(tmp_path):
    """Whole clusters on damaged files: Cluster(...) opens (and serves) or raises a pylog error."""
    logging.getLogger("pylog").setLevel(logging.CRITICAL)
    base = tmp_path / "base"
    original = _build(base)
    rng = random.Random(14)
    tree = json.loads(original)
    paths: List[Tuple] = list(_paths(tree))
    outcomes = {"opened": 0, "refused": 0}
    for i in range(12):
        d = tmp_path / f"c{i}"
        import shutil

        shutil.copytree(base, d)
        if i % 2:
            blob = bytearray(original)
            blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        else:
            blob = bytearray(json.dumps(_set(tree, rng.choice(paths), rng.choice(WRONG + [_DELETE]))).encode())
        (d / METADATA_FILE).write_bytes(bytes(blob))
        try:
            c = Cluster(d, brokers=3, seed=1)
        except errors.PylogError:
            outcomes["refused"] += 1
            continue
        try:
            outcomes["opened"] += 1
            c._check()
        finally:
            c.close()
    assert outcomes["refused"] >= 4
