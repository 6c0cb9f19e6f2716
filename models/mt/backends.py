"""The text-MT backends beside CTranslate2, one row each: the one table that names them.

A backend is called by its name: ``--mt NAME:SPEC`` and the hops of ``--mt auto`` routes
(``apertium:eng-spa``) go to the backend ``NAME``. Its row names the object that answers for
it (``MtBackendHooks``: what is installed, a shared worker for a hop, what a listener is told,
the ``models list`` lines) and its options (a frozen dataclass in a leaf module): the options
tree (``speechpipe.config``) gives each row a group of that type, named ``options_group``
(default: the name), so ``--set apertium.hold_words=3`` reaches its workers. Adding a backend
is its module, its options module and one row here.

CTranslate2 models (``ct2:MODEL``, a registered name: ``models.mt.registry``) are the built-in
backend and have no row: every hop that names no backend here is one of theirs.

A leaf: the options tree imports this table, so it imports no backend (the hooks are imported
on first use) and nothing heavier than the standard library.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from speechpipe.models.workers.guard import WorkerGuard
    from speechpipe.stages.model_api import TextMtRequest, TextMtResult

__all__ = ["MT_BACKENDS", "MtBackend", "MtBackendHooks", "SharedTranslator", "backend_of",
           "backend_pairs", "backend_usage"]


class SharedTranslator(Protocol):
    """A backend's shared worker for one hop (sessions share it; the pipeline closes it)."""

    guard: WorkerGuard

    @property
    def model_id(self) -> str:
        """What the translation memory keys on."""
        ...

    def check_languages(self, source_lang: str, target_lang: str) -> None:
        """``LanguageError`` unless it translates ``source_lang`` -> ``target_lang``."""
        ...

    async def translate(self, request: TextMtRequest) -> TextMtResult:
        """The text-MT seam's call (``stages.text_mt``)."""
        ...

    def close(self) -> None:
        """Stop (blocking, idempotent)."""
        ...


class MtBackendHooks(Protocol):
    """What a backend answers for (its row's ``hooks``)."""

    def pairs(self) -> dict[tuple[str, str], str]:
        """The installed directions, (source, target) ISO 639-1 codes -> the hop that
        translates them (``NAME:SPEC``): what ``--mt auto`` may route through."""
        ...

    def check(self, hop: str) -> None:
        """``LanguageError`` naming what is installed unless ``hop`` is (``--mt NAME:SPEC``)."""
        ...

    def worker(self, hop: str, options: Any) -> SharedTranslator:
        """A new shared worker for ``hop`` with the backend's ``options``, started (blocking)."""
        ...

    def warm(self, options: Any) -> list[str]:
        """The hops to start with the server (``LanguageError`` for one not installed)."""
        ...

    def describe(self, hop: str) -> str:
        """What a listener is told translates, e.g. ``rule-based MT (Apertium eng-spa)``."""
        ...

    def install_hint(self, source: str, target: str) -> str | None:
        """What to do so that ``source`` -> ``target`` is installed, or None."""
        ...

    def listing(self) -> tuple[list[dict[str, Any]], list[str]]:
        """``models list``: its installed pairs as JSON rows, and as the text's lines."""
        ...


@dataclass(frozen=True, slots=True)
class MtBackend:
    """One text-MT backend's row."""

    name: str  # ``--mt NAME:SPEC``; its hops are ``NAME:SPEC``
    hooks: str  # "module:object" of its ``MtBackendHooks``, imported on first use
    options: str = ""  # "module:factory" of its options' defaults; empty: none
    options_group: str = ""  # its options' group in the pipeline's tree (default: ``name``)

    @property
    def group(self) -> str:
        """The name of its options' group in the tree (``--set GROUP.FIELD``)."""
        return self.options_group or self.name

    def load(self) -> MtBackendHooks:
        """Its hooks (the backend's module imported now)."""
        module, _, name = self.hooks.partition(":")
        hooks: MtBackendHooks = getattr(importlib.import_module(module), name)
        return hooks

    def default_options(self) -> Any:
        """Its options' defaults; None when it takes none."""
        if not self.options:
            return None
        module, _, factory = self.options.partition(":")
        return getattr(importlib.import_module(module), factory)()

    def options_in(self, tree: Any) -> Any:
        """Its options in the pipeline's options ``tree`` (its group), else its defaults."""
        found = getattr(tree, self.group, None) if self.options else None
        return found if found is not None else self.default_options()


MT_BACKENDS: dict[str, MtBackend] = {
    "apertium": MtBackend("apertium", "speechpipe.models.mt.apertium:HOOKS",
                          options="speechpipe.models.mt.apertium_options:ApertiumOptions"),
}


def backend_of(hop: str) -> MtBackend | None:
    """The backend a hop or ``--mt`` value names (``apertium:eng-spa``); None for a
    CTranslate2 model."""
    name, sep, _ = hop.partition(":")
    return MT_BACKENDS.get(name) if sep else None


def backend_pairs() -> dict[tuple[str, str], tuple[str, str]]:
    """Every backend's installed directions: (source, target) -> (backend, hop); the first
    row of the table that has a direction keeps it."""
    pairs: dict[tuple[str, str], tuple[str, str]] = {}
    for backend in MT_BACKENDS.values():
        for direction, hop in backend.load().pairs().items():
            pairs.setdefault(direction, (backend.name, hop))
    return pairs


def backend_usage() -> list[str]:
    """How ``--mt`` names each backend: ``apertium:PAIR``."""
    return [f"{name}:PAIR" for name in MT_BACKENDS]
