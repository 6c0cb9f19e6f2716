"""The configuration tree as a file: one-line descriptions of its leaves (read from the
comments beside each field in the option dataclasses, where every default is written once),
and ``--config FILE``: a TOML file in the shape ``speechpipe config`` prints, read back.

Precedence: the defaults, then the file, then the shorthand flags, then ``--set``.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any

from speechpipe.config import GROUPS, MODEL_ALIASES, Config, apply_overrides, config_dict
from speechpipe.errors import InputError, echoed
from speechpipe.output_paths import read_bounded

__all__ = ["describe_leaves", "load_config_file", "render_config", "MAX_CONFIG_BYTES"]

MAX_CONFIG_BYTES = 1 << 20  # a configuration file is a few kilobytes; refuse anything huge
_DESCRIPTION_CHARS = 100
_SENTENCE_END = re.compile(r"(?<![.])\.\s+(?=[A-Z])")  # not "0 (lenient) .. 3 (strict)"


_COMMENTS: dict[str, dict[str, str]] = {}  # by class, read once


def _field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class's source: its attribute docstring, the comment at
    the end of its line, else the block of comment lines right above it; the first
    sentence, one line."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    if key not in _COMMENTS:
        _COMMENTS[key] = _read_comments(cls)
    return _COMMENTS[key]


def _read_comments(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments: dict[str, str] = {}
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    for node, after in zip(body, [*body[1:], None], strict=True):
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):  # an attribute docstring
            comments[node.target.id] = _one_line(after.value.value)
            continue
        line = lines[node.lineno - 1]
        text = ""
        tail = line.split("  # ", 1)
        if len(tail) == 2 and node.end_lineno == node.lineno:
            text = tail[1]
        else:
            above: list[str] = []
            for prev in reversed(lines[: node.lineno - 1]):
                if not prev.strip().startswith("#"):
                    break
                above.insert(0, prev.strip().lstrip("#").strip())
            text = " ".join(above)
        text = _one_line(text)
        if text:
            comments[node.target.id] = text
    return comments


def _one_line(text: str) -> str:
    """The first sentence of a comment, on one line and at most ``_DESCRIPTION_CHARS``."""
    text = " ".join(text.split()).removeprefix("... ")
    text = _SENTENCE_END.split(text)[0].strip().removesuffix(".").strip()
    if len(text) > _DESCRIPTION_CHARS:
        text = text[: _DESCRIPTION_CHARS - 3].rsplit(" ", 1)[0].rstrip(",;:") + "..."
    return text


# Leaves whose field has no comment of its own (their group's docstring explains them
# together): a line each here, so `speechpipe config` describes every option.
_MORE = {
    "pipeline.mt_threads": "CTranslate2 threads per text-MT model (--mt ct2:MODEL)",
    "pipeline.translation_memory_items": "translated segments remembered (repeats are not "
                                         "translated again)",
    "catch_up.backlog_s": "backlog mode: queued speech ahead of the stream (s) at which each "
                          "speed applies",
    "catch_up.speeds": "backlog mode: the speaking rate at each backlog_s step",
    "catch_up.span_s": "span mode: ear-voice span (s) up to which speech goes at its own rate",
    "catch_up.ramp_s": "span mode: over this many more seconds the rate rises to max_speed",
    "catch_up.max_speed": "span mode: the fastest speaking rate",
    "catch_up.finish_speed": "the least rate for the rest of an utterance once the speaker "
                             "stopped",
    "catch_up.speed_step": "rates are rounded to multiples of this (0: not rounded)",
    "asr.language_confident": "auto: the vote's share (0-1) that fixes the language early "
                              "and that a session keeps",
    "asr.language_min_s": "auto: the least audio (s) a sure vote needs",
    "asr.language_lock_s": "auto: the audio (s) after which the vote's leader is fixed "
                           "however unsure",
    "asr.keep_detected_language": "auto: later utterances keep a language found sure "
                                  "until one is sure of another (false: each utterance "
                                  "detects its own)",
    "asr.detect_among": "auto: the languages the detection chooses among, e.g. es,en "
                        "(empty: all)",
    "asr.align_margin_s": "align policy: commit the words aligned this far (s) before the "
                          "audio end",
    "phrases.first_words": "words the first phrase of an utterance needs before it is spoken",
    "phrases.max_words": "committed words that make a phrase without punctuation",
    "phrases.min_words_at_punctuation": "words a phrase needs to be cut at clause punctuation",
    "text_mt.beam_size": "beam of the text-MT decodes",
    "text_mt.lookahead": "commit the translation words the captions' tentative words do not "
                         "change, in the same update (false: LocalAgreement-n alone)",
    "text_mt.commit_when_caught_up": "at a pause (nothing tentative) commit the translation "
                                     "of everything heard",
    "text_mt.clause_min_words": "a clause boundary closes a segment after this many words",
    "text_mt.max_segment_words": "a segment is closed at this many words whatever its text",
    "piper.noise_scale": "Piper's noise scale (none: the voice's own)",
    "piper.noise_w_scale": "Piper's phoneme-width noise (none: the voice's own)",
    "piper.volume": "loudness factor of the synthesized speech",
    "limits.max_message_bytes": "largest WebSocket message a client may send (bytes)",
    "quotas.control_frame_burst": "ping/pong/close frames allowed at once (burst of "
                                  "control_frames_per_s)",
    "degrade.down_lag_s": "calm: event-loop lag under this (s)",
    "degrade.down_load_ratio": "calm: sessions under this factor of the capacity",
    "degrade.max_level": "the lowest rung of the degrade ladder",
    # leaves of serve's shorthand flags (their help; this module is below the server's)
    "quotas.max_session_s": "maximum session length in seconds (0 = no limit) "
                            "(--max-session-s)",
    "quotas.max_idle_s": "close a session after this many seconds without input "
                          "(0 = off) (--max-idle-s)",
    "quotas.max_sessions_per_token": "concurrent sessions one issued token may hold "
                                     "(0 = no limit) (--max-sessions-per-token)",
    "quotas.max_sessions_per_ip": "concurrent connections from one address (0 = no limit) "
                                  "(--max-sessions-per-ip)",
    "limits.ping_timeout_s": "drop a client that does not answer a ping within this many s "
                             "(0 = off) (--ping-timeout)",
    "load.degrade_enabled": "step down the degrade ladder under load (--no-degrade: never)",
}


def describe_leaves(config: Config | None = None) -> dict[str, str]:
    """``GROUP.FIELD`` -> a one-line description, for every leaf that has one (the field's
    comment, else the help of the shorthand flag that sets it)."""
    config = config or Config()
    out: dict[str, str] = {}
    for group, path in GROUPS.items():
        section = config
        for name in path:
            section = getattr(section, name)
        for name, text in _field_comments(type(section)).items():
            out[f"{group}.{name}"] = text
    for alias in MODEL_ALIASES:
        out.setdefault(alias.leaf, f"{_one_line(alias.help)} ({alias.flag})")
    for leaf, text in _MORE.items():
        out.setdefault(leaf, text)
    return out


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_as_text(v) for v in value)
    return str(value)


def _overrides(table: dict[str, Any], path: tuple[str, ...], where: str,
               out: list[str], server: bool) -> None:
    by_path = {p: g for g, p in GROUPS.items()}
    for key, value in table.items():
        here = (*path, key)
        if isinstance(value, dict):
            known = here in by_path or any(p[: len(here)] == here for p in by_path)
            if not known:
                raise InputError(f"{where}: no option group "
                                 f"[{echoed('.'.join(here), quote=False)}] (groups: "
                                 f"{', '.join('.'.join(p) for p in by_path)})")
            _overrides(value, here, where, out, server)
        elif path not in by_path:
            raise InputError(f"{where}: {echoed('.'.join(here), quote=False)} is not an option "
                             "(options sit in groups, e.g. [pipeline.asr] step_s = 1.0)")
        elif isinstance(value, list) and any(isinstance(v, list | dict) for v in value):
            raise InputError(f"{where}: {echoed('.'.join(here), quote=False)} holds nested "
                             "lists or tables; a leaf is a value or a flat list")
        elif server or path[0] != "server":
            out.append(f"{by_path[path]}.{key}={_as_text(value)}")


def load_config_file(path: str | Path, config: Config | None = None, *,
                     server: bool = True) -> Config:
    """``config`` (default: the defaults) with every leaf the TOML file at ``path`` sets;
    ``server=False`` (translate, eval) skips the server's groups, so one file serves every
    command. Bad files and values raise ``InputError`` in one line naming the file."""
    path = Path(path)
    try:  # a regular file only (a FIFO blocked, /dev/zero never ended), read up to the cap
        data = read_bounded(path, MAX_CONFIG_BYTES, f"--config {path}",
                            "a configuration file")
        tree = tomllib.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"--config {path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"--config {path}: is a folder, not a TOML file") from None
    except OSError as exc:
        raise InputError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(f"--config {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"--config {path}: not valid TOML ({exc})") from None
    except RecursionError:  # tomllib recurses per [ and {: ~300 deep ends its stack
        raise InputError(f"--config {path}: nested too deeply; not a configuration "
                         "file") from None
    overrides: list[str] = []
    _overrides(tree, (), f"--config {path}", overrides, server)
    try:
        return apply_overrides(config or Config(), overrides)
    except InputError as exc:  # name the file, not --set
        raise InputError(f"--config {path}: {str(exc).removeprefix('--set ')}") from None


def _toml_value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def _toml_table(prefix: str, tree: dict[str, Any], lines: list[str],
                notes: dict[str, str] | None = None) -> None:
    leaves = {k: v for k, v in tree.items() if not isinstance(v, dict)}
    if prefix:
        lines.append(f"\n[{prefix}]")
    for key, value in leaves.items():
        line = f"# {key} = none" if value is None else f"{key} = {_toml_value(value)}"
        note = (notes or {}).get(f"{prefix}.{key}")
        lines.append(f"{line}  # {note}" if note else line)
    for key, value in tree.items():
        if isinstance(value, dict):
            _toml_table(f"{prefix}.{key}" if prefix else key, value, lines, notes)


def render_config(config: Config, fmt: str = "toml") -> str:
    """The effective tree as TOML (None values appear as comments) or JSON."""
    tree = config_dict(config)
    if fmt == "json":
        return json.dumps(tree, indent=2, ensure_ascii=False)
    notes = {".".join((*GROUPS[leaf.split(".")[0]], leaf.split(".", 1)[1])): text
             for leaf, text in describe_leaves(config).items()}
    lines: list[str] = ["# speechpipe configuration; set a leaf with --set GROUP.FIELD=VALUE,",
                        "# or save this output and pass it back with --config FILE",
                        "# groups: " + ", ".join(f"{g} = {'.'.join(p)}" for g, p in GROUPS.items())]
    _toml_table("", tree, lines, notes)
    return "\n".join(lines).strip() + "\n"
