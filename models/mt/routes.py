"""``--mt auto``: how a session gets from the spoken language to the target language.

The choice reads only ``$SPEECHPIPE_HOME/registry.json`` (no model loads), in this order:

1. an installed text-MT pair for (source, target): ``text``;
2. the target is English: Whisper's own ``translate`` task, ``whisper`` (so the X -> English
   default never changes with what else is installed);
3. an installed Apertium pair for (source, target) (``models.mt.apertium``, rule-based): ``text``
   with the hop ``apertium:MODE`` -- direct, never through English when a direct pair is there;
4. two installed pairs source->en and en->target: ``text+text`` (the captions are translated
   twice; Whisper then runs one decode per step instead of two, and captions commit sooner
   than Whisper's English);
5. an installed en->target pair, a neural one first, else Apertium's: ``whisper+text``
   (Whisper's English is the pivot, so any of Whisper's languages, and ``auto``, reach the
   target); with ``auto``, an utterance detected as English, or as a language with a direct
   Apertium pair to the target, is translated from its own captions instead (``direct``);
6. else ``LanguageError`` naming the exact command that makes it work (an ``apt install`` of
   the Apertium pair Debian has, else ``speechpipe models pull``).

The pairs of the backends beside CTranslate2 (``models.mt.backends``: Apertium's) come in as
``rule_based``: (source, target) -> hop name, so the choice stays a pure function of what is
installed.

With ``source="auto"`` step 1 only takes models that translate from many languages (NLLB,
M2M-100, multi-source Marian): the detected language is known per utterance only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from speechpipe.errors import LanguageError

__all__ = ["MtRoute", "choose_route", "install_hint", "pull_hint", "PAIR_CATALOGUE",
           "installed_pairs"]

RouteKind = Literal["whisper", "text", "text+text", "whisper+text"]

# Short names ``speechpipe models pull`` knows: OPUS-MT (Marian) pairs on the Hugging Face hub
# (Helsinki-NLP/opus-mt-SRC-TGT). Converted on the fly with CTranslate2's converter.
_OPUS_PAIRS = (
    "en-es", "en-fr", "en-de", "en-it", "en-nl", "en-ru", "en-zh", "en-ar", "en-sv", "en-fi",
    "en-da", "en-uk", "en-cs", "en-ro", "en-hu", "en-hi", "en-vi", "en-id", "en-tr",
    "es-en", "fr-en", "de-en", "it-en", "nl-en", "ru-en", "zh-en", "ja-en", "ar-en",
    "fr-es", "es-fr", "de-fr", "fr-de", "es-de", "de-es", "es-it", "it-es",
)
PAIR_CATALOGUE: dict[str, str] = {pair: f"Helsinki-NLP/opus-mt-{pair}" for pair in _OPUS_PAIRS}
"""Short name -> Hugging Face repo, for ``models pull``."""
MULTILINGUAL = "nllb-600m"
"""The short name of the many-pair model (``models pull nllb-600m``)."""


@dataclass(frozen=True, slots=True)
class MtRoute:
    """The chosen route: ``hops`` are the registered MT model names, in order."""

    kind: RouteKind
    hops: tuple[str, ...] = ()
    # ``whisper+text`` with ``auto``: spoken languages whose captions a direct pair translates
    # instead of Whisper's English (language -> hop), chosen per utterance by the language
    # detected; English speech is translated from its own captions, never re-said by Whisper
    direct: tuple[tuple[str, str], ...] = ()

    @property
    def whisper_translates(self) -> bool:
        """Whether the ASR runs Whisper's ``translate`` task (to English) too."""
        return self.kind in ("whisper", "whisper+text")

    def describe(self, source: str, target: str) -> str:
        """One line for logs and ``--verbose``: the route without anything spoken."""
        if self.kind == "whisper":
            return f"{source} -> en with Whisper's translate task"
        if self.kind == "text":
            return f"{source} -> {target} with MT model {self.hops[0]}"
        if self.kind == "text+text":
            return (f"{source} -> en -> {target} with MT models {self.hops[0]} and "
                    f"{self.hops[1]}")
        line = f"{source} -> en with Whisper, en -> {target} with MT model {self.hops[0]}"
        if self.direct:
            line += "; direct from " + ", ".join(f"{lang} ({hop})" for lang, hop in self.direct)
        return line


def _langs(entry: Mapping[str, Any], key: str) -> frozenset[str] | None:
    value = entry.get(key)
    if value is None:
        return None
    return frozenset(str(v) for v in value)


def _usable(entry: Mapping[str, Any]) -> bool:
    return Path(str(entry.get("path", ""))).is_dir()


def _pick(entries: Mapping[str, Mapping[str, Any]], source: str, target: str) -> str | None:
    """The most specific installed model for the pair (fewest languages, then by name)."""
    found: list[tuple[int, str]] = []
    for name, entry in entries.items():
        sources, targets = _langs(entry, "source_langs"), _langs(entry, "target_langs")
        if targets is not None and target not in targets:
            continue
        if source == "auto":
            if sources is not None and len(sources) < 2:
                continue
        elif sources is not None and source not in sources:
            continue
        if not _usable(entry):
            continue
        width = (len(sources) if sources is not None else 1000) + (
            len(targets) if targets is not None else 1000)
        found.append((width, name))
    return min(found)[1] if found else None


def choose_route(
    source: str, target: str, entries: Mapping[str, Mapping[str, Any]],
    rule_based: Mapping[tuple[str, str], str] | None = None,
) -> MtRoute:
    """The route for ``source`` (a Whisper code or ``auto``) to ``target`` (see module);
    ``rule_based``: the other backends' installed pairs (Apertium's), (source, target) ->
    hop name."""
    rule_based = rule_based or {}
    if target == "en" and source in ("auto", "en"):
        return MtRoute("whisper")
    direct = _pick(entries, source, target)
    if direct is not None:
        return MtRoute("text", (direct,))
    if target == "en":
        return MtRoute("whisper")
    if (source, target) in rule_based:
        return MtRoute("text", (rule_based[(source, target)],))
    second = _pick(entries, "en", target)
    if second is not None and source not in ("auto", "en"):
        first = _pick(entries, source, "en")
        if first is not None:
            return MtRoute("text+text", (first, second))
    if second is None and ("en", target) in rule_based:
        second = rule_based[("en", target)]
    if second is not None:
        own: tuple[tuple[str, str], ...] = ()
        if source == "auto":  # per utterance: the detected language's own pair first
            pairs = {"en": second}
            if second == rule_based.get(("en", target)):  # one backend, one policy
                pairs |= {src: hop for (src, tgt), hop in rule_based.items()
                          if tgt == target and src != "en"}
            own = tuple(sorted(pairs.items()))
        return MtRoute("whisper+text", (second,), own)
    raise LanguageError(f"target language {target!r} needs a text MT model and none is "
                        f"installed for {source} -> {target}: {install_hint(source, target)}")


def install_hint(source: str, target: str) -> str:
    """The command that makes ``source`` reach ``target``: a backend's install line for a
    direct pair (Apertium's Debian package), else for an English one (Whisper's English as
    the pivot), else a pull."""
    from speechpipe.models.mt.backends import MT_BACKENDS

    for pair in ((source, target), ("en", target)):
        for backend in MT_BACKENDS.values():
            line = backend.load().install_hint(*pair) if pair[0] != "auto" else None
            if line:
                via = "" if pair == (source, target) else (
                    f" (any spoken language reaches {target} through Whisper's English)")
                return f"{line}{via}, or {pull_hint(target)}"
    return pull_hint(target)


def pull_hint(target: str) -> str:
    """The ``models pull`` command that makes any language reach ``target``."""
    pair = f"en-{target}"
    if pair in PAIR_CATALOGUE:
        return (f"run `speechpipe models pull {pair}` (any spoken language then reaches "
                f"{target} through English)")
    return (f"run `speechpipe models pull {MULTILINGUAL}` (one model for many pairs) or bring "
            "one with `speechpipe models add PATH`")


def installed_pairs(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Target language -> source languages an installed model translates ("*": any)."""
    pairs: dict[str, set[str]] = {}
    for entry in entries.values():
        if not _usable(entry):
            continue
        targets = _langs(entry, "target_langs")
        sources = _langs(entry, "source_langs")
        for tgt in sorted(targets or ()):
            pairs.setdefault(tgt, set()).update(sources if sources is not None else {"*"})
    return {tgt: sorted(srcs) for tgt, srcs in sorted(pairs.items())}
