"""Faults that real Kafka clients see: ``cluster.inject_fault(...)``.

Like franz-go's kfake ``ControlKey`` and librdkafka's mock cluster
``push_request_errors``: a rule matches requests by API (name or key),
broker (whose listener got it) and topic (named anywhere in the request), and
then, for its next ``count`` matches (None: until removed):

* ``error="NOT_LEADER_OR_FOLLOWER"`` (a Kafka error name or code): the request
  is answered with that code everywhere it carries one, without reaching the
  broker (the API's ``fail`` function builds the answer);
* ``delay_ms=...``: the request is served (or failed) that much later;
* ``drop_connection=True``: the connection is closed instead of answered.

:meth:`FaultTable.add` returns a :class:`Fault` handle: ``remove()`` (or use it
as a context manager), ``hits`` (matches so far). Rules are tried in the order
they were added; the first that matches applies.

Thread-safety: add/remove from any thread; matching runs on the I/O thread
under the table's lock.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Union

from pylog.errors import InvalidConfigurationError
from pylog.protocol import codec
from pylog.protocol.api import REGISTRY, RequestContext


class Fault:
    """One injected rule; a handle the caller keeps to remove it."""

    def __init__(self, table: "FaultTable", api_key: int, error: Optional[int], count: Optional[int],
                 broker: Optional[int], topic: Optional[str], delay_ms: int, drop_connection: bool):
        self.table = table
        self.api_key = api_key
        self.error = error
        self.remaining = count
        self.broker = broker
        self.topic = topic
        self.delay_ms = delay_ms
        self.drop_connection = drop_connection
        self.hits = 0
        self.removed = False

    def remove(self) -> None:
        """Stop applying this rule (idempotent)."""
        self.table.remove(self)

    @property
    def active(self) -> bool:
        return not self.removed and (self.remaining is None or self.remaining > 0)

    def __enter__(self) -> "Fault":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def apply(self, ctx: RequestContext, req: Any, serve: Callable[[], None]) -> None:
        """Called by the server for a matched request (I/O thread)."""
        if self.drop_connection:
            if self.delay_ms:
                ctx.scheduler.call_later(self.delay_ms, ctx.close_connection,
                                         f"injected fault: dropped {ctx.spec.name}")
            else:
                ctx.close_connection(f"injected fault: dropped {ctx.spec.name}")
            return

        def go() -> None:
            if self.error is not None:
                ctx.spec.fail(ctx, req, self.error)  # type: ignore[misc]
            else:
                serve()

        if self.delay_ms:
            ctx.scheduler.call_later(self.delay_ms, go)
        elif self.error is not None:
            ctx.scheduler.call_soon(go)
        else:
            go()

    def __repr__(self) -> str:
        name = REGISTRY[self.api_key].name if self.api_key in REGISTRY else self.api_key
        return (f"Fault(api={name}, error={self.error}, remaining={self.remaining}, broker={self.broker}, "
                f"topic={self.topic!r}, delay_ms={self.delay_ms}, drop_connection={self.drop_connection}, "
                f"hits={self.hits})")


def _names_in(req: Any) -> List[str]:
    """Every topic name a request carries (topics[].name / .topic, topic_data[].name, resources)."""
    out: List[str] = []
    for attr in ("topics", "topic_data"):
        for t in getattr(req, attr, None) or []:
            for field in ("name", "topic"):
                n = getattr(t, field, None)
                if isinstance(n, str):
                    out.append(n)
                    break
    return out


class FaultTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: List[Fault] = []

    def add(self, api: Union[str, int], error: Union[str, int, None] = None, count: Optional[int] = 1,
            broker: Optional[int] = None, topic: Optional[str] = None, delay_ms: int = 0,
            drop_connection: bool = False) -> Fault:
        key = _api_key(api)
        code: Optional[int] = None
        if error is not None:
            code = _error_code(error)
            if REGISTRY[key].fail is None:
                raise InvalidConfigurationError(f"API {REGISTRY[key].name} cannot answer injected errors")
        if count is not None and (not isinstance(count, int) or count < 1):
            raise InvalidConfigurationError(f"count must be a positive int or None, got {count!r}")
        if not isinstance(delay_ms, int) or delay_ms < 0:
            raise InvalidConfigurationError(f"delay_ms must be a non-negative int, got {delay_ms!r}")
        if code is None and not delay_ms and not drop_connection:
            raise InvalidConfigurationError("a fault needs error=..., delay_ms=... or drop_connection=True")
        f = Fault(self, key, code, count, broker, topic, delay_ms, drop_connection)
        with self._lock:
            self._rules.append(f)
        return f

    def remove(self, f: Fault) -> None:
        with self._lock:
            f.removed = True
            if f in self._rules:
                self._rules.remove(f)

    def clear(self) -> None:
        with self._lock:
            for f in self._rules:
                f.removed = True
            self._rules.clear()

    def match(self, ctx: RequestContext, req: Any) -> Optional[Fault]:
        if not self._rules:
            return None
        with self._lock:
            for f in self._rules:
                if not f.active or f.api_key != ctx.api_key:
                    continue
                if f.broker is not None and f.broker != ctx.broker_id:
                    continue
                if f.topic is not None and f.topic not in _names_in(req):
                    continue
                f.hits += 1
                if f.remaining is not None:
                    f.remaining -= 1
                    if f.remaining <= 0:
                        self._rules.remove(f)
                return f
        return None


def _api_key(api: Union[str, int]) -> int:
    if isinstance(api, int) and not isinstance(api, bool):
        key = api
    elif isinstance(api, str):
        by_name = {s.name.lower(): k for k, s in REGISTRY.items()}
        key = by_name.get(api.lower().replace("_", ""), -1)
        if key < 0:
            key = by_name.get(api.lower(), -1)
    else:
        key = -1
    if key not in REGISTRY:
        raise InvalidConfigurationError(f"unknown or unserved API {api!r}; served: "
                                        f"{', '.join(s.name for s in REGISTRY.values())}")
    return key


def _error_code(error: Union[str, int]) -> int:
    if isinstance(error, int) and not isinstance(error, bool):
        return error
    if isinstance(error, str) and error.upper() in codec.ERROR_CODES:
        return codec.ERROR_CODES[error.upper()]
    raise InvalidConfigurationError(f"unknown Kafka error {error!r} (use Kafka's name, e.g. 'NOT_LEADER_OR_FOLLOWER')")


__all__ = ["Fault", "FaultTable"]
