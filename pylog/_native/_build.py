"""cffi build script for the C core (out-of-line API mode).

`setup.py` runs it through ``cffi_modules``; ``python pylog/_native/_build.py``
builds it in place for development, and then the producer's send path too
(``sendpath/sendpath.c``, a plain CPython extension with its own build step,
``sendpath/_build_sendpath.py``: it is a client of the C core, not part of it). ``PYLOG_SANITIZE=1`` adds
AddressSanitizer and UndefinedBehaviorSanitizer (run Python with
``LD_PRELOAD=$(gcc -print-file-name=libasan.so)`` then).

``python pylog/_native/_build.py --out DIR`` builds into ``DIR`` instead
(``_plg.so`` and ``_sendpath.so``) and leaves the in-place libraries alone;
point ``PYLOG_NATIVE_LIB`` and ``PYLOG_SENDPATH_LIB`` at the built files to
load them (``./dev test`` does this for its sanitizer pass, see
docs/hardening.md).
"""
from __future__ import annotations

import os
import pathlib

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = ["crc.c", "batch.c", "index.c", "arrow.c"]

ffibuilder = FFI()
ffibuilder.cdef((HERE / "plg.cdef").read_text())

_cflags = ["-std=c99", "-O3", "-Wall", "-Wextra", "-Wno-unused-parameter", "-D_GNU_SOURCE"]
_ldflags: list[str] = ["-lpthread"]
if os.environ.get("PYLOG_SANITIZE") == "1":
    _cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
    _ldflags += ["-fsanitize=address,undefined"]
    # Every undefined-behaviour report is fatal, not just printed.
    _cflags += ["-fno-sanitize-recover=all"]

# setuptools wants sources relative to the project root (where setup.py
# runs); the in-place build compiles from a temporary directory, so it uses
# absolute paths.
_src_dir = str(HERE) if __name__ == "__main__" else os.path.relpath(HERE, os.getcwd())
ffibuilder.set_source(
    "pylog._native._plg",
    '#include "plg.h"',
    sources=[os.path.join(_src_dir, s) for s in SOURCES],
    include_dirs=[str(HERE)],
    extra_compile_args=_cflags,
    extra_link_args=_ldflags,
)


def _build_out_of_place(out: pathlib.Path) -> pathlib.Path:
    """Compile into ``out`` (its own cffi tmpdir); return the library's path."""
    out = out.resolve()
    tmp = out / "cffi"
    ffibuilder.compile(tmpdir=str(tmp), verbose=False)
    built = sorted((tmp / "pylog" / "_native").glob("_plg*.so"))
    if len(built) != 1:
        raise SystemExit(f"expected one built library under {tmp}, found {built}")
    target = out / "_plg.so"
    tmp_target = out / "_plg.so.tmp"
    tmp_target.write_bytes(built[0].read_bytes())
    os.replace(tmp_target, target)  # a process loading the old file keeps its copy
    return target


def _build_sendpath(out: "pathlib.Path | None" = None) -> pathlib.Path:
    """The send path's own build step (``sendpath/_build_sendpath.py``), run after the C core's."""
    import sys

    sys.path.insert(0, str(HERE / "sendpath"))
    from _build_sendpath import build_sendpath  # type: ignore[import-not-found]

    return build_sendpath(out)


if __name__ == "__main__":
    import sys

    os.chdir(HERE.parent.parent)
    if len(sys.argv) == 3 and sys.argv[1] == "--out":
        print(f"built {_build_out_of_place(pathlib.Path(sys.argv[2]))}")
        print(f"built {_build_sendpath(pathlib.Path(sys.argv[2]).resolve())}")
        raise SystemExit(0)
    if len(sys.argv) != 1:
        raise SystemExit("usage: python pylog/_native/_build.py [--out DIR]")
    ffibuilder.compile(tmpdir="build/cffi", verbose=False)
    built = sorted(pathlib.Path("build/cffi/pylog/_native").glob("_plg*.so"))
    for stale in HERE.glob("_plg*.so"):
        stale.unlink()  # a leftover build with another ABI tag would shadow the new one
    for so in built:
        target = HERE / so.name
        target.write_bytes(so.read_bytes())
        print(f"built {target}")
    print(f"built {_build_sendpath()}")
