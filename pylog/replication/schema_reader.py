"""Bounds-checked reads of Kafka's internal-topic record layouts (``__consumer_offsets``,
``__transaction_state``): fixed-width big-endian ints, int16- or compact-length strings,
int32-length bytes, unsigned varints.

Every byte is untrusted: each read checks the bytes left first, and every failure is a
:class:`~pylog.errors.CorruptRecordError` naming what was being read, the field and the byte
position. Complexity: O(1) per fixed-width read, O(length) per string or bytes. Thread-safety:
one reader per decode (not shared).
"""
from __future__ import annotations

import struct
from typing import Optional

from pylog.errors import CorruptRecordError

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


class SchemaReader:
    """Reads ``data`` from the start; ``what`` names the record in every error."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, data: bytes, what: str):
        self.buf = memoryview(bytes(data))
        self.pos = 0
        self.what = what

    @property
    def left(self) -> int:
        """Bytes not read yet."""
        return len(self.buf) - self.pos

    def fail(self, msg: str) -> CorruptRecordError:
        """The error for ``msg`` at the current position (the caller raises it)."""
        return CorruptRecordError(f"{self.what}: {msg} at byte {self.pos} of {len(self.buf)}")

    def take(self, n: int, name: str = "field") -> memoryview:
        if n < 0 or n > len(self.buf) - self.pos:
            raise self.fail(f"{name} needs {n} bytes, {len(self.buf) - self.pos} left")
        v = self.buf[self.pos:self.pos + n]
        self.pos += n
        return v

    def i8(self, name: str = "int8") -> int:
        return int(I8.unpack(self.take(1, name))[0])

    def i16(self, name: str = "int16") -> int:
        return int(I16.unpack(self.take(2, name))[0])

    def i32(self, name: str = "int32") -> int:
        return int(I32.unpack(self.take(4, name))[0])

    def i64(self, name: str = "int64") -> int:
        return int(I64.unpack(self.take(8, name))[0])

    def uvarint(self, name: str = "varint") -> int:
        n = shift = 0
        while True:
            if shift > 28:
                raise self.fail(f"{name}: unsigned varint longer than 5 bytes")
            b = self.take(1, name)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def string(self, name: str = "string", compact: bool = False) -> str:
        """An int16-length (or, ``compact``, a varint length + 1) UTF-8 string; null is corrupt."""
        s = self.nullable_string(name, compact)
        if s is None:
            raise self.fail(f"{name} is null")
        return s

    def nullable_string(self, name: str = "string", compact: bool = False) -> Optional[str]:
        """As :meth:`string`, with a null length (-1) read as None."""
        n = self.uvarint(name) - 1 if compact else self.i16(name)
        if n < 0:
            return None
        try:
            return bytes(self.take(n, name)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{name} is not UTF-8 ({exc.reason})") from None

    def bytes_(self, name: str = "bytes") -> Optional[bytes]:
        """An int32-length byte string (-1: null)."""
        n = self.i32(name)
        return None if n < 0 else bytes(self.take(n, name))

    def end(self) -> None:
        """Raise unless every byte was read."""
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} trailing bytes")


__all__ = ["SchemaReader", "I8", "I16", "I32", "I64"]
