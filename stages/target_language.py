"""Is a piece of text in the language it should be in? (a pure check, shared by the
pipeline, which re-decodes a translation piece in the wrong language, and ``speechpipe
eval``, which counts them.)

Whisper's translate task sometimes transcribes instead of translating: French comes out
where English should, and the English voice reads it. The question asked here is narrow on
purpose: of the expected language and the few it could wrongly be (the source language),
which does the text look like? ``py3langid`` (langid.py's model, shipped in its wheel) ranks
all its languages; only the candidates are compared, which is what restricting it with
``set_languages`` does, without changing a shared identifier's state (the ranking itself is
read-only, so one identifier serves every thread).

Under ``MIN_WORDS`` words a text is not judged (``None``): two or three words are often
names, numbers or words both languages share.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["MIN_WORDS", "in_language", "identifier"]

MIN_WORDS = 4  # fewer words than this: too short to judge

# Whisper language codes that py3langid spells otherwise
_LANGID_CODE = {"jw": "jv", "yue": "zh", "iw": "he"}

_identifier: Any = None
_lock = threading.Lock()


_unavailable = False  # the model could not be loaded (e.g. no space for its temp file)


def identifier() -> Any:
    """The module's own ``py3langid`` identifier, created on first use (about 0.5 s; the
    engine's warm-up makes it, so no live decode waits for it). None when it cannot be made:
    py3langid unpacks its model through a temporary file, which a full disk or a file-size
    limit refuses; the check then judges nothing rather than failing decodes."""
    global _identifier, _unavailable
    if _identifier is None and not _unavailable:
        with _lock:
            if _identifier is None and not _unavailable:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                try:
                    _identifier = LanguageIdentifier.from_model_file(MODEL_FILE)
                except OSError:
                    _unavailable = True
    return _identifier


def _code(language: str) -> str:
    language = language.strip().lower()
    return _LANGID_CODE.get(language, language)


def in_language(text: str, expected: str, alternatives: Iterable[str]) -> bool | None:
    """True when ``text`` reads as ``expected`` rather than any of ``alternatives``, False
    when one of them ranks first; None when it cannot be judged: under ``MIN_WORDS`` words,
    or no alternative (besides ``expected``) the identifier knows, or ``expected`` unknown
    to it. Languages are Whisper's codes (``en``, ``fr``...)."""
    if len(text.split()) < MIN_WORDS:
        return None
    ident = identifier()
    if ident is None:
        return None
    known = set(ident.labels)
    want = _code(expected)
    others = {_code(a) for a in alternatives} - {want}
    others &= known
    if want not in known or not others:
        return None
    candidates = others | {want}
    for language, _score in ident.rank(text):  # best first
        if language in candidates:
            return language == want
    return None  # pragma: no cover - every known label is ranked
