"""Imports flow downward only: stages < models, voices < transport < the application.

Every import statement in the package (module level, inside functions and under
``TYPE_CHECKING`` alike) is read with ``ast``; a lower layer naming a higher one fails.
``speechpipe.errors`` is a leaf that every layer may import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

# folder -> (dotted package, layer)
FOLDERS = {
    "stages": ("speechpipe.stages", 0),
    "models": ("speechpipe.models", 1),
    "voices": ("speechpipe.voices", 1),
    "transport": ("speechpipe.transport", 2),
    "speechpipe": ("speechpipe", 3),
}
LAYER_NAMES = {0: "stages", 1: "models/voices", 2: "transport", 3: "the application"}
LEAVES = {"speechpipe.errors"}


def layer_of(module: str) -> int | None:
    """The layer of a ``speechpipe`` module, None for leaves and third-party modules."""
    if module in LEAVES or not (module == "speechpipe" or module.startswith("speechpipe.")):
        return None
    for package, layer in sorted(FOLDERS.values(), key=lambda item: -len(item[0])):
        if package != "speechpipe" and (module == package or module.startswith(package + ".")):
            return layer
    return 3


def package_files() -> list[tuple[Path, str, int]]:
    files = []
    for folder, (package, layer) in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files.append((path, ".".join((package, *parts)), layer))
    return files


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in ``path``; ``from X import name`` also
    yields ``X.name`` (which may be a submodule)."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                # ``from speechpipe import errors`` names the leaf; ``from speechpipe.x import
                # Name`` names the module ``speechpipe.x``.
                found.append((node.lineno, target if target in LEAVES else base))
    return found


def test_layer_table_covers_the_package() -> None:
    files = package_files()
    assert len(files) > 40
    assert {layer for _, _, layer in files} == {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("module", "layer"),
    [("speechpipe.errors", None), ("numpy", None), ("speechpipe.stages.vad", 0),
     ("speechpipe.models.workers.batching", 1), ("speechpipe.voices", 1),
     ("speechpipe.transport.protocol", 2), ("speechpipe.session", 3), ("speechpipe", 3)],
)
def test_layer_of(module: str, layer: int | None) -> None:
    assert layer_of(module) == layer


def test_a_violation_is_seen(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from speechpipe.session import Pipeline\nimport speechpipe.errors\n")
    imports = imported_modules(bad, "speechpipe.stages.bad")
    assert [(line, layer_of(name)) for line, name in imports] == [(1, 3), (2, None)]


def test_imports_flow_downward_only() -> None:
    violations = []
    for path, module, layer in package_files():
        for line, imported in imported_modules(path, module):
            target = layer_of(imported)
            if target is not None and target > layer:
                violations.append(
                    f"{path.relative_to(ROOT)}:{line}: {LAYER_NAMES[layer]} imports "
                    f"{imported} ({LAYER_NAMES[target]})"
                )
    assert not violations, "\n".join(violations)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, by every import statement (function-level
    and ``TYPE_CHECKING`` ones included); ``from X import name`` counts ``X.name`` when that
    is a module of the package, ``X`` otherwise."""
    files = package_files()
    modules = {module for _, module, _ in files}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for path, module, _ in files:
        for _, imported in imported_modules(path, module):
            if imported in modules and imported != module:
                graph[module].add(imported)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    if sub in modules and sub != module:
                        graph[module].add(sub)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_a_cycle_is_seen() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    """No two package modules import each other, directly or round a loop, by any import
    statement (function-level and ``TYPE_CHECKING`` imports included): a cycle means the
    options or a core cannot be read without loading what sits above it."""
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)

