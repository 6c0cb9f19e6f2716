"""A clip manifest (JSONL: one clip an object a line, ``file`` and ``lang`` at least), read
and checked line by line: the one reader of ``eval``, ``eval --compare`` and the benches
(``bench load``, ``cost``, ``soak``, ``drill``). Pure: the standard library, the language
table and ``output_paths``' bounded reader only, no audio and no model.

Reference translations: ``translations`` (``{lang: text}``) and, older, ``translation_en``;
``reference_for(clip, target)`` is the one place they are read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speechpipe.errors import InputError
from speechpipe.output_paths import open_regular

__all__ = ["load_manifest", "reference_for", "MAX_MANIFEST_LINE", "MAX_MANIFEST_LINES"]

_TEXT_FIELDS = ("file", "lang", "id", "transcript", "translation_en", "transcript_kind",
                "category")
MAX_MANIFEST_LINE = 1 << 20  # one clip's line: references are sentences, not megabytes
MAX_MANIFEST_LINES = 100_000  # clips held at once (every clip is kept until the run ends)


def load_manifest(path: str | Path) -> list[dict[str, Any]]:
    """The clips of a JSONL manifest; ``InputError`` naming the line for anything a run would
    trip on later: bad UTF-8 or JSON (deep nesting included), a clip that is not an object,
    a missing ``file``/``lang``, a field that is not a string, an unknown language,
    ``translations`` that is not an object of language -> text."""
    from speechpipe.models.mt.ct2_folder import WHISPER_LANGUAGES

    path = Path(path)
    clips = []
    try:  # a regular file only: a FIFO would block, a device never end
        fh = open_regular(path, str(path))
    except FileNotFoundError:
        raise InputError(f"{path}: no such manifest") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the manifest ({exc.strerror})") from None
    with fh:
        number = 0
        # each line read no further than its cap (iterating reads a whole line first: a
        # 512 MiB line cost 1.1 GB before its check)
        while raw := fh.readline(MAX_MANIFEST_LINE + 1):
            number += 1
            where = f"{path}:{number}"
            if len(raw) > MAX_MANIFEST_LINE:
                raise InputError(f"{where}: line over {MAX_MANIFEST_LINE >> 10} KiB")
            if number > MAX_MANIFEST_LINES:
                raise InputError(f"{path}: over {MAX_MANIFEST_LINES} lines; split the manifest")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{where}: not UTF-8 (byte {exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                clip = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: not JSON ({exc.msg})") from None
            except RecursionError:
                raise InputError(f"{where}: nested too deeply to be a clip") from None
            if not isinstance(clip, dict) or "file" not in clip or "lang" not in clip:
                raise InputError(f"{where}: a clip needs 'file' and 'lang'")
            for key in _TEXT_FIELDS:
                optional = key not in ("file", "lang", "id")  # null: no reference
                if key in clip and not isinstance(clip[key], str) and not (
                    optional and clip[key] is None
                ):
                    raise InputError(f"{where}: '{key}' must be a string, not "
                                     f"{type(clip[key]).__name__}")
            if not clip["file"].strip():
                raise InputError(f"{where}: 'file' is empty")
            if clip["lang"].strip().lower() not in WHISPER_LANGUAGES:
                raise InputError(f"{where}: unknown language {clip['lang']!r}")
            clip["lang"] = clip["lang"].strip().lower()
            if "translations" in clip:
                clip["translations"] = _translations(clip["translations"], where,
                                                     WHISPER_LANGUAGES)
            clip["path"] = str(path.parent / clip["file"])
            clip.setdefault("id", Path(clip["file"]).stem)
            clip["line"] = number
            clips.append(clip)
    return clips


def _translations(value: Any, where: str, languages: frozenset[str]) -> dict[str, str | None]:
    """A clip's ``translations`` (``{lang: text}``, null: none) with its languages normalized;
    ``InputError`` for anything else. Its size is bounded by the line's, like every text."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: 'translations' must be an object of language -> text, "
                         f"not {type(value).__name__}")
    out: dict[str, str | None] = {}
    for lang, text in value.items():
        code = lang.strip().lower()
        if code not in languages:
            raise InputError(f"{where}: 'translations' has an unknown language {lang!r}")
        if text is not None and not isinstance(text, str):
            raise InputError(f"{where}: 'translations.{code}' must be a string, not "
                             f"{type(text).__name__}")
        out[code] = text
    return out


def reference_for(clip: dict[str, Any], target: str) -> str:
    """The clip's reference translation into ``target``: ``translations[target]``, else
    ``translation_en`` for English; "" when it has none."""
    target = target.strip().lower()
    text = (clip.get("translations") or {}).get(target)
    if not (text and text.strip()) and target == "en":
        text = clip.get("translation_en")
    return text if text and text.strip() else ""
