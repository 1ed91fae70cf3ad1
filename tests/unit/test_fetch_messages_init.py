"""The fetch messages' fast ``__init__`` (``messages._dict_init``) keeps what the dataclass promised."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from pylog.errors import NotLeaderError
from pylog.replication.messages import FetchRequest, FetchResponse


@pytest.mark.parametrize("cls", [FetchRequest, FetchResponse])
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
