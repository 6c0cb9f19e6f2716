"""A new TTS engine or text-MT backend is its own files plus one row in one registry table
(issue 73, end state 1). The engines of "other languages" are the proof: Apertium is
models/mt/apertium.py and apertium_options.py plus its row in models/mt/backends.py;
espeak-ng is voices/espeak_engine.py, espeak_library.py and espeak_options.py plus its row
in voices/engines.py. No other module of the package names them: its options group, its
ranges, the routes, the session, ``models list`` and the server's languages all reach it
through its row. An engine that needs edits in five places fails here, naming them.

"Names" is read from the code (``ast``), not from comments or docstrings: an import of one
of the engine's modules, a string that is its name, one of its hops (``apertium:eng-spa``)
or one of its ``--set`` leaves (``espeak.rate_wpm``), an attribute that is its options group
(``options.espeak``), or an identifier with its name in it (``warm_apertium``).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = {"speechpipe": "speechpipe", "stages": "speechpipe.stages",
           "models": "speechpipe.models", "voices": "speechpipe.voices",
           "transport": "speechpipe.transport"}


@dataclass(frozen=True)
class Engine:
    name: str  # its registry key: what a voice or a route names
    group: str  # its options group in the tree
    own: frozenset[str]  # its files
    table: str  # the one registry table with its row
    word: str  # an identifier with this in it names it (lowercase)


ENGINES = {
    "apertium": Engine("apertium", "apertium",
                       frozenset({"models/mt/apertium.py", "models/mt/apertium_options.py"}),
                       "models/mt/backends.py", "apertium"),
    "espeak-ng": Engine("espeak-ng", "espeak",
                        frozenset({"voices/espeak_engine.py", "voices/espeak_library.py",
                                   "voices/espeak_options.py"}),
                        "voices/engines.py", "espeak_ng"),
}

# modules that use an engine by name without being its wiring: nothing needs them to add one
USERS = {
    "speechpipe/bench/drill.py": "the fault drill that kills Apertium's chain mid-talk",
}


@cache
def leaves(engine: Engine) -> tuple[str, ...]:
    """Its ``--set`` leaves (``espeak.rate_wpm``), from its row's options."""
    from speechpipe.models.mt.backends import MT_BACKENDS
    from speechpipe.voices.engines import ENGINES as TTS_ENGINES

    row = TTS_ENGINES.get(engine.name) or MT_BACKENDS[engine.name]
    return tuple(f"{engine.group}.{f.name}" for f in dataclasses.fields(row.default_options()))


def module_of(path: str) -> str:
    folder, _, rest = path.partition("/")
    parts = Path(rest).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((FOLDERS[folder], *parts))


def package_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for folder in FOLDERS
                  for p in (root / folder).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are statements (docstrings, bare strings)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def _imports(node: ast.AST, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".")[: -node.level]
            base = ".".join([*anchor, *([base] if base else [])])
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    if isinstance(node, ast.alias):
        return [node.asname or node.name.rpartition(".")[2]]
    return []


def namings(source: str, module: str, engine: Engine) -> list[str]:
    """Where ``source`` names ``engine`` (line: what)."""
    own_modules = {module_of(path) for path in engine.own}
    tree = ast.parse(source)
    skipped = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        for imported in _imports(node, module):
            if imported in own_modules:
                found.append(f"{line}: imports {imported}")
        for name in _identifiers(node):
            if engine.word in name.lower().replace("-", "_"):
                found.append(f"{line}: {name}")
        if isinstance(node, ast.Attribute) and node.attr == engine.group:
            found.append(f"{line}: .{node.attr}")
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in skipped):
            text = node.value
            if (text == engine.name or text.startswith((f"{engine.name}:", *leaves(engine)))
                    or any(text.startswith(m) for m in own_modules)):
                found.append(f"{line}: {text[:40]!r}")
    return found


def touched(root: Path, engine: Engine) -> dict[str, list[str]]:
    """The package's modules outside the engine's own files that name it."""
    out = {}
    for path in package_files(root):
        if path in engine.own:
            continue
        hits = namings((root / path).read_text(encoding="utf-8"), module_of(path), engine)
        if hits:
            out[path] = hits
    return out


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_an_engine_is_its_files_and_one_row(name: str) -> None:
    engine = ENGINES[name]
    others = {path: hits for path, hits in touched(ROOT, engine).items()
              if path != engine.table and path not in USERS}
    assert not others, (
        f"{name} is named outside its own files and its row in {engine.table}: {others} "
        "(reach it through its registry row instead)")
    files = {path for path in engine.own if (ROOT / path).exists()} | {engine.table}
    assert len(files) == len(engine.own) + 1


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_its_row_is_one_entry_of_the_table(name: str) -> None:
    """The table names it in one row (its key and the entry), and the row names its
    options, so the tree has its group with no line of its own."""
    from speechpipe.config import GROUPS, PipelineOptions
    from speechpipe.models.mt.backends import MT_BACKENDS
    from speechpipe.voices.engines import ENGINES as TTS_ENGINES

    engine = ENGINES[name]
    table = ast.parse((ROOT / engine.table).read_text(encoding="utf-8"))
    rows = [node for node in ast.walk(table) if isinstance(node, ast.Dict)
            and any(isinstance(k, ast.Constant) and k.value == name for k in node.keys)]
    assert len(rows) == 1, f"{engine.table}: one table names {name}"
    row = (TTS_ENGINES | MT_BACKENDS)[name]  # type: ignore[operator]
    assert row.group == engine.group and row.options
    assert GROUPS[engine.group] == ("pipeline", engine.group)
    assert type(getattr(PipelineOptions(), engine.group)) is type(row.default_options())


def test_the_check_sees_what_an_engine_s_wiring_looked_like() -> None:
    """The reader itself: the places the two engines were named in before their rows (the
    options tree, the session, the routes, ``models list``) are each caught."""
    apertium, espeak = ENGINES["apertium"], ENGINES["espeak-ng"]
    samples = {
        "speechpipe.config": ("from speechpipe.models.mt.apertium_options import "
                              "ApertiumOptions\n", apertium),
        "speechpipe.session": ("def warm_apertium(self):\n    return self.options.apertium\n",
                               apertium),
        "speechpipe.routing": ("def f(mt):\n    return mt.startswith('apertium:')\n", apertium),
        "speechpipe.models_cli": ("robotic = [v for v in voices if v['engine'] == 'espeak-ng']\n",
                                  espeak),
        "speechpipe.config_ranges": ("RANGES = {'espeak.rate_wpm': (80, 450)}\n", espeak),
    }
    for module, (source, engine) in samples.items():
        assert namings(source, module, engine), module
    quiet = ('"""Apertium and espeak-ng, in a docstring."""\n'
             "# apertium in a comment\n"
             "config = {'espeak': {'voice': 'en-us'}}\n"  # Piper's phonemizer: not the engine
             "message = 'espeak.voice: not an espeak-ng voice name'\n")
    assert not namings(quiet, "speechpipe.voices.registry", espeak)
    assert not namings(quiet, "speechpipe.voices.registry", apertium)
    assert re.search("apertium", quiet, re.IGNORECASE)  # the text has it; the code does not
