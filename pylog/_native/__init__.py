"""The C core, loaded through cffi. The only module that imports ``ffi``/``lib``.

Importing checks that the compiled library's version string matches
``pylog._version.__version__`` (a stale build fails loudly, naming the rebuild
command). This package is the typed boundary to C (PyNaCl style): every
``plg_*`` call, every ``ffi.new``/``from_buffer``/``release`` and every
C-status-to-exception mapping lives here - this module (loading, status
codes, :func:`check`, the CRCs), :mod:`pylog._native.batch` (``batch.c``:
scan, stamp, encode, decode, fetch runs) and :mod:`pylog._native.index`
(``index.c``: index checks and lookups, segment bookkeeping, point lookups).
Callers get Python values or :mod:`pylog.errors` exceptions, never a cffi
object. May import: :mod:`pylog.errors`, :mod:`pylog._version`, the
standard library.

Thread-safety: every C function is re-entrant; cffi releases the GIL during
calls, and no C function keeps a pointer to a Python buffer after returning.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Union

from pylog._version import __version__
from pylog.errors import CORRUPT_STATUS_NAMES, ORDER_STATUS_NAME, PylogError, native_error



def _load_from(path: str, name: str = "pylog._native._plg") -> Any:
    """Load the compiled module ``name`` from ``path`` (an out-of-place build)."""
    import importlib.machinery
    import importlib.util
    import sys

    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None or not os.path.isfile(path):
        raise ImportError(f"{path!r} is not a compiled pylog extension (PYLOG_NATIVE_LIB / PYLOG_SENDPATH_LIB)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


#: The file the C core was loaded from. ``PYLOG_NATIVE_LIB`` names another
#: build to load instead of the in-place one (``./dev test`` points it at the
#: sanitizer build, ``python pylog/_native/_build.py --out DIR``).
NATIVE_PATH: str
_mod: Any  # the cffi extension module (no stub: its ffi/lib are cffi objects)
try:
    if os.environ.get("PYLOG_NATIVE_LIB"):
        _mod = _load_from(os.environ["PYLOG_NATIVE_LIB"])
    else:
        import importlib

        _mod = importlib.import_module("pylog._native._plg")
    ffi, lib = _mod.ffi, _mod.lib
    NATIVE_PATH = str(_mod.__file__)
except ImportError as exc:  # pragma: no cover - exercised only without a build
    raise ImportError(
        "pylog's C core is not built. Run the README's set-up command, or "
        "`python pylog/_native/_build.py` from the project root."
    ) from exc

#: The file the producer's send path extension (sendpath.c) was loaded from,
#: or None when it is not built (the producer then runs its Python fallback).
#: ``PYLOG_SENDPATH_LIB`` names another build (the sanitizer pass's), as
#: ``PYLOG_NATIVE_LIB`` does for the C core.
SENDPATH_PATH: Optional[str] = None
#: The send-path extension module (sendpath/sendpath.c), or None when it is not built.
sendpath_module: Any = None
if os.environ.get("PYLOG_SENDPATH_LIB"):
    sendpath_module = _load_from(os.environ["PYLOG_SENDPATH_LIB"], "pylog._native._sendpath")
else:
    try:
        import importlib

        sendpath_module = importlib.import_module("pylog._native._sendpath")
    except ImportError:  # pragma: no cover - only without a build of sendpath.c
        pass
if sendpath_module is not None:
    SENDPATH_PATH = str(sendpath_module.__file__)
#: The extension's C record builders (storage reads build Records with them), or None without it.
make_records: Any = getattr(sendpath_module, "make_records", None)
untrack_records: Any = getattr(sendpath_module, "untrack_records", None)

_built_version = ffi.string(lib.plg_version()).decode()
if _built_version != __version__:  # pragma: no cover - depends on a stale build
    raise ImportError(
        f"pylog's C core was built for version {_built_version} but the Python package is "
        f"{__version__}; rebuild it with `pip install -e .` or `python pylog/_native/_build.py`."
    )

Buffer = Union[bytes, bytearray, memoryview]

OK: int = lib.PLG_OK
ETRUNCATED: int = lib.PLG_ETRUNCATED
ECORRUPT: int = lib.PLG_ECORRUPT
ECRC: int = lib.PLG_ECRC
EMAGIC: int = lib.PLG_EMAGIC
BATCH_OVERHEAD: int = lib.PLG_BATCH_OVERHEAD
LOG_OVERHEAD: int = lib.PLG_LOG_OVERHEAD


#: C status code -> its ``PLG_*`` name, for the codes :func:`pylog.errors.native_error` classifies.
_STATUS_NAMES = {getattr(lib, n): n for n in (*CORRUPT_STATUS_NAMES, ORDER_STATUS_NAME)}


def strerror(rc: int) -> str:
    """The C core's description of status ``rc``."""
    return ffi.string(lib.plg_strerror(rc)).decode()


def check(rc: int, what: str, path: Optional[str] = None, position: Optional[int] = None) -> None:
    """Raise the :mod:`pylog.errors` exception for a non-zero C status."""
    if rc != OK:
        raise native_error(rc, _STATUS_NAMES.get(rc, ""), strerror(rc), what, path=path, position=position)


def crc32c_hardware() -> bool:
    """True when CRC32C runs on the CPU's instruction (SSE4.2 / ARMv8 CRC)."""
    return bool(lib.plg_crc32c_hardware())


def crc32c(data: Buffer, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``crc``.

    Complexity: O(n); about 20 GB/s with the CPU instruction.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    out = ffi.new("uint32_t *")
    buf = ffi.from_buffer(data)
    lib.plg_crc32c(buf, len(buf), crc, out)
    return int(out[0])


def crc32c_table(data: Buffer, crc: int = 0) -> int:
    """CRC-32C by the table path only (to cross-check the hardware path)."""
    out = ffi.new("uint32_t *")
    buf = ffi.from_buffer(data)
    lib.plg_crc32c_table(buf, len(buf), crc, out)
    return int(out[0])


def crc32(data: Buffer, crc: int = 0) -> int:
    """CRC-32 (IEEE, zlib's) of ``data``; legacy message sets use it."""
    out = ffi.new("uint32_t *")
    buf = ffi.from_buffer(data)
    lib.plg_crc32(buf, len(buf), crc, out)
    return int(out[0])


__all__ = [
    "ffi",
    "lib",
    "NATIVE_PATH",
    "check",
    "strerror",
    "crc32c",
    "crc32c_table",
    "crc32",
    "crc32c_hardware",
    "PylogError",
]
