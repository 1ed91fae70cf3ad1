"""Transports carry requests between brokers and clients (DESIGN.md §1)."""
from pylog.runtime.transport.base import Transport
from pylog.runtime.transport.direct import DirectTransport
from pylog.runtime.transport.simnet import SimulatedNetwork

__all__ = ["Transport", "DirectTransport", "SimulatedNetwork"]
