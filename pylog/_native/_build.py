"""cffi build script for the C core (out-of-line API mode).

`setup.py` runs it through ``cffi_modules`` (and builds the producer's send
path, sendpath.c, a plain CPython extension, from :func:`sendpath_extension`);
``python pylog/_native/_build.py`` builds both in place for development. ``PYLOG_SANITIZE=1`` adds
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
from typing import TYPE_CHECKING

from cffi import FFI

if TYPE_CHECKING:
    from setuptools import Extension

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = ["crc.c", "batch.c", "index.c"]

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


def sendpath_extension(src_dir: str) -> "Extension":
    """The producer's send path (sendpath.c): a plain CPython extension, since it works on Python objects.

    ``PYLOG_SANITIZE=1`` builds it with ASan and UBSan too (the sanitizer pass loads it through
    ``PYLOG_SENDPATH_LIB``)."""
    from setuptools import Extension

    cflags = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers",
              "-Wno-cast-function-type"]
    ldflags: list[str] = []
    if os.environ.get("PYLOG_SANITIZE") == "1":
        cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g",
                   "-fno-sanitize-recover=all"]
        ldflags += ["-fsanitize=address,undefined"]
    return Extension("pylog._native._sendpath", sources=[os.path.join(src_dir, "sendpath.c")],
                     extra_compile_args=cflags, extra_link_args=ldflags)


def _build_sendpath(out: "pathlib.Path | None" = None) -> pathlib.Path:
    """Compile the send path extension: in place (development builds; pip builds it from setup.py),
    or as ``out/_sendpath.so``. Returns the built file."""
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    dist = Distribution({"name": "pylog-sendpath", "ext_modules": [sendpath_extension(str(HERE))]})
    cmd = build_ext(dist)
    if out is None:
        cmd.inplace = True
        cmd.build_temp = "build/sendpath"
    else:
        cmd.build_lib = str(out / "sendpath-lib")
        cmd.build_temp = str(out / "sendpath-tmp")
    cmd.ensure_finalized()
    if out is None:
        for stale in HERE.glob("_sendpath*.so"):
            stale.unlink()
    cmd.run()
    built = sorted((HERE if out is None else out / "sendpath-lib" / "pylog" / "_native").glob("_sendpath*.so"))
    if len(built) != 1:
        raise SystemExit(f"expected one built send path library, found {built}")
    if out is None:
        return built[0]
    target = out / "_sendpath.so"
    tmp_target = out / "_sendpath.so.tmp"
    tmp_target.write_bytes(built[0].read_bytes())
    os.replace(tmp_target, target)
    return target


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
