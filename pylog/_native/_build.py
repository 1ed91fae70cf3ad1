"""cffi build script for the C core (out-of-line API mode).

`setup.py` runs it through ``cffi_modules``; ``python pylog/_native/_build.py``
builds the extension in place for development. ``PYLOG_SANITIZE=1`` adds
AddressSanitizer and UndefinedBehaviorSanitizer (run Python with
``LD_PRELOAD=$(gcc -print-file-name=libasan.so)`` then).
"""
from __future__ import annotations

import os
import pathlib

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = ["crc.c", "batch.c", "index.c"]

ffibuilder = FFI()
ffibuilder.cdef((HERE / "plg.cdef").read_text())

_cflags = ["-std=c99", "-O3", "-Wall", "-Wextra", "-Wno-unused-parameter", "-D_GNU_SOURCE"]
_ldflags: list[str] = ["-lpthread"]
if os.environ.get("PYLOG_SANITIZE") == "1":
    _cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
    _ldflags += ["-fsanitize=address,undefined"]

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

if __name__ == "__main__":
    os.chdir(HERE.parent.parent)
    ffibuilder.compile(tmpdir="build/cffi", verbose=False)
    built = sorted(pathlib.Path("build/cffi/pylog/_native").glob("_plg*.so"))
    for stale in HERE.glob("_plg*.so"):
        stale.unlink()  # a leftover build with another ABI tag would shadow the new one
    for so in built:
        target = HERE / so.name
        target.write_bytes(so.read_bytes())
        print(f"built {target}")
