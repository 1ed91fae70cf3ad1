"""The per-batch messages (ProduceRequest, ProduceResponse) have a hand-written ``__init__``
(faster than the one a frozen dataclass generates): it must behave exactly like the generated one."""
from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from pylog.errors import NotLeaderError
from pylog.replication.messages import ProduceRequest, ProduceResponse


@pytest.mark.parametrize("cls", [ProduceRequest, ProduceResponse])
def test_init_signature_matches_the_fields(cls: type) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields):
        expected = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == expected, f.name


def _sample_args(cls: type) -> list:
    return [f"v-{f.name}" for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("cls", [ProduceRequest, ProduceResponse])
def test_fields_set_by_position_and_keyword(cls: type) -> None:
    args = _sample_args(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    a = cls(*args)
    b = cls(**dict(zip(names, args)))
    assert dataclasses.astuple(a) == tuple(args)
    assert a == b and hash(a) == hash(b)
    assert dataclasses.replace(a, topic="other").topic == "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.topic = "x"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(a).startswith(f"{cls.__name__}(topic='v-topic'")


def test_defaults() -> None:
    r = ProduceResponse("t", 1, 7)
    assert (r.error, r.message, r.base_offset, r.timestamp) == (None, "", -1, -1)
    e = ProduceResponse("t", 1, 7, error=NotLeaderError, message="m")
    assert e != r and e.error is NotLeaderError
    req = ProduceRequest("t", 0, b"x", -1, 100, 3)
    assert (req.topic, req.partition, req.records, req.acks, req.timeout_ms, req.correlation_id) == ("t", 0, b"x", -1, 100, 3)
