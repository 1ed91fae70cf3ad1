"""Build hook: metadata lives in pyproject.toml; this only compiles the C core."""
from setuptools import setup

setup(cffi_modules=["pylog/_native/_build.py:ffibuilder"])
