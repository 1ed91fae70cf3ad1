"""The per-batch messages (produce and fetch requests and responses) get a fast ``__init__`` from
``messages._dict_init`` (it fills the instance dict instead of one ``object.__setattr__`` per
field, as a frozen dataclass's generated one does): it must behave exactly like the generated one."""
from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from pylog.errors import NotLeaderError
from pylog.replication.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse

MESSAGES = [ProduceRequest, ProduceResponse, FetchRequest, FetchResponse]


@pytest.mark.parametrize("cls", MESSAGES)
def test_init_signature_matches_the_fields(cls: type) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields):
        expected = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == expected, f.name


def _sample_args(cls: type) -> list:
    return [f"v-{f.name}" for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("cls", MESSAGES)
def test_fields_set_by_position_and_keyword(cls: type) -> None:
    args = _sample_args(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    a = cls(*args)
    b = cls(**dict(zip(names, args)))
    assert dataclasses.astuple(a) == tuple(args)
    assert a == b and hash(a) == hash(b)
    assert dataclasses.replace(a, topic="other").topic == "other" and a.topic == "v-topic"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.topic = "x"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(a)) == a
    first = names[0]
    assert repr(a).startswith(f"{cls.__name__}({first}='v-{first}'")


def test_defaults() -> None:
    r = ProduceResponse("t", 1, 7)
    assert (r.error, r.message, r.base_offset, r.timestamp) == (None, "", -1, -1)
    e = ProduceResponse("t", 1, 7, error=NotLeaderError, message="m")
    assert e != r and e.error is NotLeaderError
    req = ProduceRequest("t", 0, b"x", -1, 100, 3)
    assert (req.topic, req.partition, req.records, req.acks, req.timeout_ms, req.correlation_id) == ("t", 0, b"x", -1, 100, 3)


@pytest.mark.parametrize("cls", MESSAGES)
def test_defaults_and_fields_are_the_dataclass_ones(cls) -> None:
    fs = dataclasses.fields(cls)
    required = [f for f in fs if f.default is dataclasses.MISSING]
    args = list(range(len(required)))
    msg = cls(*args)
    for f, v in zip(required, args):
        assert getattr(msg, f.name) == v
    for f in fs[len(required):]:
        assert getattr(msg, f.name) == f.default
    with pytest.raises(TypeError):
        cls(*args[:-1])  # a required field missing
    with pytest.raises(TypeError):
        cls(*args, no_such_field=1)


def test_messages_stay_frozen_comparable_and_picklable() -> None:
    req = FetchRequest(2, "t", 0, 40, 3, 17, max_wait_ms=500, replica_incarnation=9)
    resp = FetchResponse("t", 0, 17, error=NotLeaderError, message="m", records=b"\x00\x01", high_watermark=5)
    for msg in (req, resp):
        with pytest.raises(dataclasses.FrozenInstanceError):
            msg.topic = "u"  # type: ignore[misc]
        assert pickle.loads(pickle.dumps(msg)) == msg
        assert hash(msg) == hash(dataclasses.replace(msg))
    assert dataclasses.replace(req, fetch_offset=41).fetch_offset == 41
    assert dataclasses.replace(req, fetch_offset=41) != req
    assert resp.records == b"\x00\x01" and resp.error is NotLeaderError and resp.log_end_offset == -1
    assert repr(req).startswith("FetchRequest(replica_id=2, topic='t'")
