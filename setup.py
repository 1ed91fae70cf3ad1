"""Build hook: metadata lives in pyproject.toml; this only compiles the C core.

The storage core is a cffi module (pylog/_native/_build.py); the producer's
per-record send path is a small CPython extension with its own build step
(pylog/_native/sendpath/), because it works on Python objects, which cffi
functions cannot take.
"""
import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylog", "_native", "sendpath"))
from _build_sendpath import sendpath_extension  # noqa: E402

setup(cffi_modules=["pylog/_native/_build.py:ffibuilder"],
      ext_modules=[sendpath_extension(os.path.join("pylog", "_native", "sendpath"))])
