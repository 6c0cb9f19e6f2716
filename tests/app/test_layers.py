"""Imports flow downward only: stages < models, voices < transport < the application.

Every import statement in the package (module level, inside functions and under
``TYPE_CHECKING`` alike) is read with ``ast``; a lower layer naming a higher one fails.
``speechpipe.errors`` is a leaf that every layer may import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
     ("speechpipe.models.batching", 1), ("speechpipe.voices", 1),
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
