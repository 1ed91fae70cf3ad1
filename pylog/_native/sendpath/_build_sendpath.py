"""Build step of the producer's send path (``sendpath.c``): a plain CPython extension.

It works on Python objects (records, futures, the producer's lock), which
cffi functions cannot take, so it is a client of the C core rather than part
of it: it lives in its own directory, includes only ``plg.h`` for the point
lookup's function type, and is built into the module ``pylog._native._sendpath``
(typed by ``pylog/_native/_sendpath.pyi``; loaded by :mod:`pylog._native`).

``setup.py`` builds it from :func:`sendpath_extension`;
``python pylog/_native/sendpath/_build_sendpath.py`` builds it in place and
``... --out DIR`` as ``DIR/_sendpath.so`` (``python pylog/_native/_build.py``
runs this after building the C core). ``PYLOG_SANITIZE=1`` adds ASan and UBSan
(the sanitizer pass loads it through ``PYLOG_SENDPATH_LIB``).
"""
from __future__ import annotations

import os
import pathlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from setuptools import Extension

HERE = pathlib.Path(__file__).resolve().parent
NATIVE = HERE.parent  # pylog/_native: plg.h, and where the built module goes


def sendpath_extension(src_dir: str) -> "Extension":
    """The send path extension, its source in ``src_dir`` (relative to setup.py's directory, or absolute)."""
    from setuptools import Extension

    cflags = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers",
              "-Wno-cast-function-type"]
    ldflags: list[str] = []
    if os.environ.get("PYLOG_SANITIZE") == "1":
        cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g",
                   "-fno-sanitize-recover=all"]
        ldflags += ["-fsanitize=address,undefined"]
    include = os.path.dirname(src_dir.rstrip("/")) or "."
    return Extension("pylog._native._sendpath", sources=[os.path.join(src_dir, "sendpath.c")],
                     include_dirs=[include], extra_compile_args=cflags, extra_link_args=ldflags)


def build_sendpath(out: "pathlib.Path | None" = None) -> pathlib.Path:
    """Compile the extension: in place (development builds; pip builds it from setup.py), or as
    ``out/_sendpath.so``. Returns the built file."""
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
        for stale in NATIVE.glob("_sendpath*.so"):
            stale.unlink()
    cmd.run()
    built = sorted((NATIVE if out is None else out / "sendpath-lib" / "pylog" / "_native").glob("_sendpath*.so"))
    if len(built) != 1:
        raise SystemExit(f"expected one built send path library, found {built}")
    if out is None:
        return built[0]
    target = out / "_sendpath.so"
    tmp_target = out / "_sendpath.so.tmp"
    tmp_target.write_bytes(built[0].read_bytes())
    os.replace(tmp_target, target)
    return target


if __name__ == "__main__":
    import sys

    os.chdir(NATIVE.parent.parent)
    if len(sys.argv) == 3 and sys.argv[1] == "--out":
        print(f"built {build_sendpath(pathlib.Path(sys.argv[2]).resolve())}")
    elif len(sys.argv) == 1:
        print(f"built {build_sendpath()}")
    else:
        raise SystemExit("usage: python pylog/_native/sendpath/_build_sendpath.py [--out DIR]")
