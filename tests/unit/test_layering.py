"""The house rules of docs/design.md, checked on every run.

* Layers import only downward: each module of ``pylog`` belongs to one layer of
  DESIGN.md section 1, and every import it makes (module level or inside a
  function; ``if TYPE_CHECKING:`` blocks excepted, since they never run) names
  a module of the same or a lower layer.
* No import cycle between modules of the package (an import at function level
  counts: it hides a cycle, it does not remove it).
* No module inside the package imports the package root ``pylog`` (the root
  imports everything; the version lives in ``pylog/_version.py``).
* No module imports another module's private name (``from pylog.x import _y``
  where ``_y`` is not a module): what crosses a module boundary has a public
  name. Private *modules* (``pylog._native``, ``pylog.client._node``) are
  package-internal and may be imported.
* cffi's ``ffi``/``lib`` are used only under ``pylog/_native/`` (its typed
  bindings); every other module calls those bindings or :mod:`pylog.record`.

The checker reads the source with :mod:`ast`; it imports nothing, so it also
sees imports on paths a test never takes.
"""
from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Optional, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2] / "pylog"

#: DESIGN.md section 1, lowest first. A module belongs to the first entry that
#: is a prefix of its dotted name; a layer may import only layers at or below it.
LAYERS: List[Tuple[str, ...]] = [
    ("pylog._version", "pylog.errors"),
    ("pylog._native",),
    ("pylog.metrics",),
    ("pylog.record",),
    ("pylog.storage",),
    ("pylog.replication",),
    ("pylog.runtime",),
    ("pylog.client",),
    ("pylog.protocol",),
    ("pylog.facade", "pylog.cluster", "pylog.shared", "pylog.local_queue", "pylog.simulation", "pylog.testing",
     "pylog.__init__"),
    ("pylog.spark", "pylog.cli", "pylog.__main__"),
]


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1 and parts != ["pylog", "__init__"]:
        parts.pop()
    return ".".join(parts)


def layer_of(name: str) -> Optional[int]:
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if name == p or name.startswith(p + "."):
                return i
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: pathlib.Path, name: str, modules: Set[str]) -> List[Tuple[str, int]]:
    """Every ``pylog`` module that ``path`` imports, with the line, TYPE_CHECKING blocks skipped."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: List[Tuple[str, int]] = []

    def resolve(target: str) -> str:
        # "pylog.storage.log.Log" -> the longest prefix that is a module
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "pylog" or alias.name.startswith("pylog."):
                    found.append((resolve(alias.name) or alias.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "pylog" or mod.startswith("pylog."):
                for alias in node.names:
                    full = f"{mod}.{alias.name}"
                    found.append((full if full in modules else (resolve(mod) or mod), node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph() -> Tuple[Dict[str, List[Tuple[str, int]]], Dict[str, pathlib.Path]]:
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(paths)
    edges = {m: [(t, line) for t, line in imports_of(p, m, modules) if t != m] for m, p in paths.items()}
    return edges, paths


def find_cycle(edges: Dict[str, List[Tuple[str, int]]]) -> Optional[List[str]]:
    state: Dict[str, int] = {}
    stack: List[str] = []

    def dfs(m: str) -> Optional[List[str]]:
        state[m] = 1
        stack.append(m)
        for t, _ in edges.get(m, []):
            if t not in edges:
                continue
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                cyc = dfs(t)
                if cyc:
                    return cyc
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            cyc = dfs(m)
            if cyc:
                return cyc
    return None


def test_every_module_has_a_layer() -> None:
    edges, _ = graph()
    assert [m for m in sorted(edges) if layer_of(m) is None] == []


def test_layers_import_only_downward() -> None:
    edges, paths = graph()
    upward = []
    for m, targets in sorted(edges.items()):
        lm = layer_of(m)
        for t, line in targets:
            lt = layer_of(t)
            if lm is not None and lt is not None and lt > lm:
                upward.append(f"{paths[m].relative_to(ROOT.parent)}:{line}: {m} imports {t}")
    assert upward == []


def test_no_module_imports_the_package_root() -> None:
    edges, paths = graph()
    bad = [f"{paths[m].relative_to(ROOT.parent)}:{line}" for m, ts in edges.items() for t, line in ts
           if t == "pylog.__init__" or t == "pylog"]
    assert bad == []


def test_no_import_cycle() -> None:
    edges, _ = graph()
    # the package root imports everything by design; nothing imports it (test above)
    assert find_cycle(edges) is None


def reachable(edges: Dict[str, List[Tuple[str, int]]], start: str) -> Set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: Set[str] = set()
    todo = [start]
    while todo:
        for t, _ in edges.get(todo.pop(), []):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_the_facades_and_the_client_interface_form_no_circle() -> None:
    """``cluster`` and ``shared`` once imported each other (``Cluster.open`` built a SharedCluster): now
    ``shared`` builds on ``cluster`` and not the other way, both build on ``facade``, and the interface
    the clients import (``runtime/cluster_context``) reaches no client and no facade."""
    edges, _ = graph()
    assert "pylog.shared" in reachable(edges, "pylog.local_queue")
    assert "pylog.cluster" in reachable(edges, "pylog.shared")
    assert "pylog.shared" not in reachable(edges, "pylog.cluster")
    assert "pylog.cluster" not in reachable(edges, "pylog.facade")
    above = [t for t in reachable(edges, "pylog.runtime.cluster_context")
             if t.startswith(("pylog.client", "pylog.protocol", "pylog.facade", "pylog.cluster", "pylog.shared"))]
    assert above == []
    for client in ("pylog.client.producer", "pylog.client.consumer", "pylog.client.admin", "pylog.protocol.server"):
        assert "pylog.runtime.cluster_context" in reachable(edges, client)


#: Private names imported across modules on purpose: none (issue 15 gave the record format, the
#: group-instance-id check and the cluster seam public names). A new one fails the test below.
PRIVATE_IMPORT_ALLOWLIST: Set[Tuple[str, str, str]] = set()


def private_imports(path: pathlib.Path, name: str, modules: Set[str]) -> List[Tuple[str, str, int]]:
    """``(source module, private name, line)`` of every ``from <pylog module> import _name`` in ``path``
    whose ``_name`` is not a module and whose source is not the module itself (TYPE_CHECKING included:
    a private type is as private as a private function)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: List[Tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = name.split(".")
            base = base if is_pkg else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        if not (mod == "pylog" or mod.startswith("pylog.")) or mod == name:
            continue
        for alias in node.names:
            n = alias.name
            if n.startswith("_") and not n.startswith("__") and f"{mod}.{n}" not in modules:
                found.append((mod, n, node.lineno))
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    _, paths = graph()
    modules = set(paths)
    bad = [f"{paths[m].relative_to(ROOT.parent)}:{line}: from {src} import {n}"
           for m, p in sorted(paths.items()) for src, n, line in private_imports(p, m, modules)
           if (m, src, n) not in PRIVATE_IMPORT_ALLOWLIST]
    assert bad == []


def test_checker_sees_private_imports(tmp_path: pathlib.Path) -> None:
    """The checker itself: a private function is found, a private module and a private alias are not."""
    a = tmp_path / "a.py"
    a.write_text("from pylog.b import _helper, public as _alias\nfrom pylog import _native\n"
                 "def f():\n    from .b import _other\n")
    found = private_imports(a, "pylog.a", {"pylog.a", "pylog.b", "pylog._native"})
    assert found == [("pylog.b", "_helper", 1), ("pylog.b", "_other", 4)]


#: Modules outside ``pylog/_native/`` allowed to use ``ffi``/``lib``: none (issue 15 item 2).
FFI_ALLOWLIST: Set[str] = set()


def ffi_uses(path: pathlib.Path) -> List[Tuple[str, int]]:
    """Where ``path`` reaches cffi's ``ffi``/``lib``: imported from ``pylog._native`` (any submodule),
    or read as an attribute of it (``_native.ffi``, ``pylog._native.lib``)."""
    tree = ast.parse(path.read_text(), str(path))
    native_names = set()  # local names bound to pylog._native or a submodule of it
    found: List[Tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module == "pylog._native" or node.module.startswith("pylog._native.")):
            for alias in node.names:
                if alias.name in ("ffi", "lib"):
                    found.append((alias.name, node.lineno))
        if isinstance(node, ast.ImportFrom) and node.module == "pylog":
            native_names.update(a.asname or a.name for a in node.names if a.name == "_native")
        if isinstance(node, ast.ImportFrom) and node.module == "pylog._native":
            native_names.update(a.asname or a.name for a in node.names if a.name not in ("ffi", "lib"))
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pylog._native"):
                    native_names.add(alias.asname or "pylog")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("ffi", "lib"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in native_names:
                found.append((node.attr, node.lineno))
    return found


def test_ffi_and_lib_only_under_native() -> None:
    _, paths = graph()
    outside = [f"{paths[m].relative_to(ROOT.parent)}:{line}: {what}" for m in sorted(paths)
               if not (m == "pylog._native" or m.startswith("pylog._native.")) and m not in FFI_ALLOWLIST
               for what, line in ffi_uses(paths[m])]
    assert outside == []


def test_ffi_checker_sees_imports_and_attributes(tmp_path: pathlib.Path) -> None:
    """The checker itself: each way of reaching ffi/lib is found; a binding call is not."""
    cases = {
        "from pylog._native import ffi, lib\n": 2,
        "from pylog._native.batch import lib\n": 1,
        "from pylog import _native\nx = _native.ffi.new('int *')\n": 1,
        "import pylog._native\nx = pylog._native.lib.plg_version()\n": 1,
        "from pylog._native import batch as _c\nx = _c.scan(b'', True, 1)\n": 0,
    }
    for i, (src, n) in enumerate(cases.items()):
        f = tmp_path / f"m{i}.py"
        f.write_text(src)
        assert len(ffi_uses(f)) == n, src


def test_checker_sees_function_level_imports_and_cycles(tmp_path: pathlib.Path) -> None:
    """The checker itself: a function-level import closing a cycle is found."""
    a = tmp_path / "a.py"
    a.write_text("import pylog.b\n")
    b = tmp_path / "b.py"
    b.write_text("def f():\n    from pylog.a import x\n")
    edges = {
        "pylog.a": imports_of(a, "pylog.a", {"pylog.a", "pylog.b"}),
        "pylog.b": imports_of(b, "pylog.b", {"pylog.a", "pylog.b"}),
    }
    assert find_cycle(edges) == ["pylog.a", "pylog.b", "pylog.a"]
    c = tmp_path / "c.py"
    c.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pylog.a\n")
    assert imports_of(c, "pylog.c", {"pylog.a"}) == []
