"""Every handler module of this package, imported once so each registers its APIs.

A module added here (``groups.py`` and the others) is found by name: no list
to edit. Each registers with :func:`pylog.protocol.api.register`.
"""
from __future__ import annotations

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
