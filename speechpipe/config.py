"""Every default in one place: one tree of frozen dataclasses.

``Config`` holds ``pipeline`` (``PipelineOptions``: what every session is built with) and
``server`` (``ServerOptions``: the server's limits and quotas, admission and the degrade
ladder, the cluster). Every scalar leaf can be set with ``--set GROUP.FIELD=VALUE``;
``GROUPS`` (derived from the tree: every option dataclass is a group, named by its field)
says where each group sits; ``speechpipe config`` prints the effective tree. Defaults live
only in the dataclasses. A shorthand flag (``--capacity 3``) is an ``Alias`` of one leaf
(``admission.capacity``): it defaults to ``None`` and, when given, writes that leaf, exactly
as ``--set`` would (``apply_aliases``).

The engines' groups are not written here: each TTS engine and text-MT backend names its own
options type in its registry row (``voices.engines.ENGINES``, ``models.mt.backends.MT_BACKENDS``)
and ``PipelineOptions`` gets one group per row (``engine_groups``), named as the row says
(``piper``, ``espeak``, ``apertium``); an option's bound may sit on its field
(``metadata["range"]``, ``metadata["text"]``), which is where an engine's options keep theirs.

Every module this one imports holds options (and pure cores) only: reading the tree loads
no server, no websockets library and no model.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from speechpipe.cluster.options import ClusterSettings
from speechpipe.config_ranges import MAX_ITEMS, Range, Text
from speechpipe.config_ranges import RANGES as _TABLE_RANGES
from speechpipe.config_ranges import TEXTS as _TABLE_TEXTS
from speechpipe.errors import InputError, echoed
from speechpipe.models.mt.backends import MT_BACKENDS, MtBackend
from speechpipe.models.workers.batch_options import BatchOptions
from speechpipe.server.options import LoadOptions
from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.catch_up_options import CatchUpOptions
from speechpipe.stages.faithfulness_options import FaithfulnessOptions
from speechpipe.stages.phrase_options import PhraseOptions
from speechpipe.stages.text_mt_options import TextMtOptions
from speechpipe.stages.vad_options import VadOptions
from speechpipe.transport.limits import ServerLimits
from speechpipe.voices.engines import ENGINES, TtsEngine

__all__ = [
    "Config", "PipelineOptions", "ServerOptions", "GROUPS", "apply_overrides", "with_overrides",
    "config_dict", "Alias", "add_aliases", "apply_aliases", "MODEL_ALIASES",
    "groups_of", "Range", "RANGES", "check_leaf", "leaf_range", "check_config", "check_group",
    "GROUP_RULES", "Text", "TEXTS", "text_rule", "MAX_ITEMS", "engine_groups",
]


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """What the models are loaded with and every session is built with; each registered
    engine's options group is added below (``engine_groups``)."""

    asr_model: str = "whisper-base"  # a bundled name, or a CTranslate2 Whisper folder
    asr_threads: int = 1  # CTranslate2 threads per ASR worker (docs/design.md)
    asr_encode_bucket_s: float = 1.0  # encode lengths are multiples of this (batching)
    # silence after the audio in every encoder input, at least (Whisper's encoder has no
    # padding mask: models/whisper/engine.py, docs/design.md "Batching")
    asr_trailing_silence_s: float = 1.0
    # least recently used dropped beyond it (models/whisper/prefill.py)
    asr_restricted_cache_mb: int = 128  # MB of restricted decoders, ~18 per ASR thread+language
    # Whisper decoder steps multiply their int8 weights in place
    # (models/native/rows_step.h) instead of through CTranslate2's oneDNN GEMM, which on
    # a CPU without AVX-512 repacks every weight matrix at every step: "auto" there, "on"
    # everywhere, "off" never (docs/design.md, "A decoder step that reads the weights in place")
    asr_inplace_step: Literal["auto", "on", "off"] = "auto"
    voice_dirs: tuple[str, ...] = ()
    phrase_cache_items: int = 512  # per voice; ~1 s of audio each
    # each session a phrase-cache namespace of its own, reusing no speech synthesized for
    # another. The bench servers set it, so their figures are not flattered; false (real
    # traffic): the sessions on a voice share its cache
    phrase_cache_per_session: bool = False
    catch_up: CatchUpOptions = field(default_factory=CatchUpOptions)
    # a voice shared by many sessions speaks first the phrase whose listener runs out of
    # speech first (stages/tts.py, voices/tts_worker.py); false: first in, first out
    tts_deadline_order: bool = True
    # one CTranslate2 thread per text-MT call: its decoder steps are too small to split
    # well, and on a machine whose cores Whisper and the voice share, a second thread waits
    # for a busy core at every step (docs/benchmarks.md, 2026-12-06: caption commit ->
    # translation commit p95 0.13 s with one thread against 0.15-0.17 s with two)
    mt_threads: int = 1
    # a text-MT update reads its forced prefix in one decoder pass (models/mt/prefill.py),
    # where the native decoder decodes what translate_batch does; false: step by step
    mt_prefill: bool = True
    translation_memory_items: int = 4096
    vad: VadOptions = field(default_factory=VadOptions)
    asr: AsrOptions = field(default_factory=AsrOptions)
    phrases: PhraseOptions = field(default_factory=PhraseOptions)
    input_capacity_frames: int = 1500  # 30 s of 20 ms frames before audio is coalesced
    fast_input_capacity_frames: int = 5  # --pace fast: the producer waits, every step decodes
    batching: BatchOptions = field(default_factory=BatchOptions)  # the shared ASR worker
    faithful: FaithfulnessOptions = field(default_factory=FaithfulnessOptions)  # guards
    text_mt: TextMtOptions = field(default_factory=TextMtOptions)  # --mt ct2:MODEL sessions
    # numpy BLAS threads for the whole process, set by the CLI and server entry points before
    # they load the models (``apply_process_limits``); None leaves the process as it is.
    # ``Pipeline.load`` itself never changes process-wide settings.
    blas_threads: int | None = 1


def engine_groups() -> dict[str, Callable[[], Any]]:
    """Each registered engine's options group: its name in the tree -> the factory of its
    defaults, the text-MT backends' first, then the TTS engines' (``MT_BACKENDS``,
    ``ENGINES``: a row that names options has a group)."""
    groups: dict[str, Callable[[], Any]] = {}
    rows: list[MtBackend | TtsEngine] = [*MT_BACKENDS.values(), *ENGINES.values()]
    for entry in rows:
        if entry.options:
            if entry.group in groups or entry.group in PipelineOptions.__dataclass_fields__:
                raise TypeError(f"two option groups are called {entry.group!r}")
            groups[entry.group] = entry.default_options
    return groups


def _with_engine_groups(base: type) -> type:
    """``base`` with a field per engine group (``engine_groups``), under the same name."""
    fields = [(group, type(factory()), field(default_factory=factory))
              for group, factory in engine_groups().items()]
    made = dataclasses.make_dataclass(base.__name__, fields, bases=(base,), frozen=True,
                                      slots=True)
    made.__module__, made.__qualname__, made.__doc__ = __name__, base.__qualname__, base.__doc__
    return made


# typed as the fields written above (an engine's options are read through its registry row:
# ``TtsEngine.options_in``, ``MtBackend.options_in``)
PipelineOptions = _with_engine_groups(PipelineOptions)  # type: ignore[misc,assignment]


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """``speechpipe serve``: connection limits and quotas, admission and the degrade ladder."""

    limits: ServerLimits = field(default_factory=ServerLimits)  # quotas: limits.quotas
    load: LoadOptions = field(default_factory=LoadOptions)  # admission, degrade: load.*
    cluster: ClusterSettings = field(default_factory=ClusterSettings)  # serve --cluster


@dataclass(frozen=True, slots=True)
class Config:
    """The whole tree: ``pipeline`` and ``server``."""

    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    server: ServerOptions = field(default_factory=ServerOptions)


def _derive_groups(node: Any, path: tuple[str, ...], out: dict[str, tuple[str, ...]]) -> None:
    """Every option dataclass under ``node`` that has settable leaves, by its field name."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            if settable_fields(value):
                if f.name in out:
                    raise TypeError(f"two option groups are called {f.name!r}")
                out[f.name] = (*path, f.name)
            _derive_groups(value, (*path, f.name), out)


_SCALARS = (bool, int, float, str)


def _get(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def _put(config: Any, path: tuple[str, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    return dataclasses.replace(config, **{head: _put(getattr(config, head), rest, value)})


def _scalar_kinds(hint: Any) -> tuple[tuple[type, ...], bool] | None:
    """The scalar types a hint allows and whether it allows None; None if not scalar."""
    if typing.get_origin(hint) is typing.Literal:
        return tuple({type(a) for a in typing.get_args(hint)}), False
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    args = typing.get_args(hint) if union else (hint,)
    optional = type(None) in args
    kinds = tuple(a for a in args if a is not type(None))
    if not kinds or not all(k in _SCALARS for k in kinds):
        return None
    return kinds, optional


def _parse_scalar(raw: str, kinds: tuple[type, ...], optional: bool) -> object:
    text = raw.strip()
    if optional and text.lower() in ("none", "off", "null"):
        return None
    for kind in kinds:
        if kind is bool:
            if text.lower() in ("true", "1", "yes", "on"):
                return True
            if text.lower() in ("false", "0", "no", "off"):
                return False
            continue
        try:
            return kind(text)
        except ValueError:
            continue
    names = " or ".join(k.__name__ for k in kinds) + (" or none" if optional else "")
    raise ValueError(f"{echoed(raw)} is not a {names}")


Parser = typing.Callable[[str], object]


def _parser(hint: Any) -> Parser | None:
    """How ``--set`` reads a value of this type: scalars, and tuples of scalars written
    comma-separated (``catch_up.speeds=1.1,1.2``); None for anything else."""
    scalar = _scalar_kinds(hint)
    if scalar is not None:
        return lambda raw: _parse_scalar(raw, *scalar)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _scalar_kinds(args[0])
        if item is not None:
            return lambda raw: tuple(
                _parse_scalar(part, *item) for part in raw.split(",") if part.strip()
            )
    return None


def settable_fields(section: Any) -> dict[str, Parser]:
    """The fields of one group that ``--set`` can change: name -> value parser."""
    hints = typing.get_type_hints(type(section))
    out = {}
    for f in dataclasses.fields(section):
        parser = _parser(hints[f.name])
        if parser is not None:
            out[f.name] = parser
    return out


# ``--set`` group -> where it sits in ``Config`` (tree order: pipeline groups, then server's)
GROUPS: dict[str, tuple[str, ...]] = {}
_derive_groups(Config(), (), GROUPS)
SERVER_GROUPS = frozenset(g for g, path in GROUPS.items() if path[0] == "server")


def _field_bounds(kind: str, make: Callable[..., Any]) -> dict[str, Any]:
    """``GROUP.FIELD`` -> the bound a field declares on itself (``metadata[kind]``: an
    engine's options keep theirs there)."""
    config = Config()
    return {f"{group}.{f.name}": make(f.metadata)
            for group, path in GROUPS.items() for f in dataclasses.fields(_get(config, path))
            if kind in f.metadata}


# every numeric leaf's range and string leaf's rule: the tables' (``config_ranges``) and the
# fields' own
RANGES: dict[str, Range] = {**_TABLE_RANGES, **_field_bounds(
    "range", lambda meta: Range(meta["range"][0], meta["range"][1],
                                open_low=meta.get("open_low", False)))}
TEXTS: dict[str, Text] = {**_TABLE_TEXTS, **_field_bounds("text", lambda m: Text(*m["text"]))}


def groups_of(tree: str) -> str:
    """The ``--set`` groups under ``pipeline`` or ``server``, comma-separated (help texts)."""
    return ", ".join(g for g, path in GROUPS.items() if path[0] == tree)


def apply_overrides(config: Config, overrides: Iterable[str]) -> Config:
    """Apply ``GROUP.FIELD=VALUE`` overrides (``--set``) to the tree, converting each value
    to the field's type; a bad key or value raises ``InputError`` naming what is accepted.
    Each value is checked against its leaf's range as it is read; the rules across the
    leaves of a group (``GROUP_RULES``) once every override is in."""
    touched: dict[str, str] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        group, _, name = key.strip().partition(".")
        shown = echoed(item)  # a refusal repeats ~80 characters of it, not 200 kB
        if not sep or group not in GROUPS or not name:
            raise InputError(f"--set {shown}: expected GROUP.FIELD=VALUE ({', '.join(GROUPS)})")
        path = GROUPS[group]
        section = _get(config, path)
        fields = settable_fields(section)
        if name not in fields:
            everything = {f.name for f in dataclasses.fields(section)}
            if name in everything:
                raise InputError(f"--set {shown}: {name} is not a single value")
            raise InputError(f"--set {shown}: {group} has no option {echoed(name)} "
                             f"(has: {', '.join(sorted(fields))})")
        try:
            value = fields[name](raw)
            check_leaf(f"{group}.{name}", value)
            config = _put(config, path, dataclasses.replace(section, **{name: value}))
            touched[group] = shown
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise InputError(f"--set {shown}: {exc}") from None
    for group, shown in touched.items():
        try:
            check_group(group, _get(config, GROUPS[group]))
        except ValueError as exc:
            raise InputError(f"--set {shown}: {exc}") from None
    return config


def with_overrides(options: PipelineOptions, overrides: Iterable[str]) -> PipelineOptions:
    """``apply_overrides`` for commands without a server (translate, eval): pipeline groups."""
    overrides = list(overrides)
    for item in overrides:
        group = item.partition("=")[0].strip().partition(".")[0]
        if group in SERVER_GROUPS:
            raise InputError(f"--set {echoed(item)}: {group} options apply to `speechpipe serve` "
                             "only")
    return apply_overrides(Config(pipeline=options), overrides).pipeline


def config_dict(config: Any) -> dict[str, Any]:
    """The tree as nested dicts of its settable leaves (JSON- and TOML-ready)."""
    out: dict[str, Any] = {}
    fields = settable_fields(config)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out[f.name] = config_dict(value)
        elif f.name in fields:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


# -- shorthand flags ---------------------------------------------------------------------------
_SWITCH = object()


@dataclass(frozen=True, slots=True)
class Alias:
    """A shorthand flag of one ``--set`` leaf: ``Alias("--capacity", "admission.capacity",
    ...)`` makes ``--capacity 3`` write what ``--set admission.capacity=3`` writes. ``type``
    reads the flag's value (it may map a flag's own spelling, e.g. 0 = off, onto the leaf's
    None); ``switch`` makes a flag without a value that writes that value; ``repeat`` makes
    a repeatable flag whose values form the leaf's tuple. Its default is the leaf's."""

    flag: str
    leaf: str  # GROUP.FIELD
    help: str
    type: Callable[[str], Any] = str
    switch: Any = _SWITCH
    repeat: bool = False
    metavar: str | None = None

    @property
    def is_switch(self) -> bool:
        """True for a flag without a value (it writes ``switch``)."""
        return self.switch is not _SWITCH

    @property
    def dest(self) -> str:
        """The argparse attribute the flag's value lands in."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def path(self) -> tuple[str, ...]:
        """Where the leaf sits in ``Config``."""
        group, _, name = self.leaf.partition(".")
        return (*GROUPS[group], name)


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


class _NotGiven:
    """An alias flag's value when the flag was not given (None can be a given value)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()


def add_aliases(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                aliases: Iterable[Alias]) -> None:
    """Add each alias as a flag defaulting to ``NOT_GIVEN``; its help names the leaf and the
    leaf's default (read from the tree: defaults are written once, in the dataclasses). A
    flag's type may turn a value into None ("0 = off"): that is written to the leaf, so
    "not given" needs a value of its own."""
    defaults = Config()
    for alias in aliases:
        default = _get(defaults, alias.path)
        text = f"{alias.help} (default {_shown(default)}; --set {alias.leaf})".replace("%", "%%")
        if alias.is_switch:  # a flag without a value: what it sets, not the leaf's default
            value = str(alias.switch).lower() if isinstance(alias.switch, bool) else alias.switch
            text = f"{alias.help} (--set {alias.leaf}={value})".replace("%", "%%")
            parser.add_argument(alias.flag, dest=alias.dest, action="store_const",
                                const=alias.switch, default=NOT_GIVEN, help=text)
        elif alias.repeat:
            parser.add_argument(alias.flag, dest=alias.dest, action="append", default=None,
                                type=alias.type, metavar=alias.metavar, help=text)
        else:
            parser.add_argument(alias.flag, dest=alias.dest, type=alias.type,
                                default=NOT_GIVEN, metavar=alias.metavar, help=text)


def apply_aliases(config: Config, args: argparse.Namespace, aliases: Iterable[Alias]) -> Config:
    """The tree with every alias flag given in ``args`` written to its leaf (flags not given
    leave the tree as it is); a value its dataclass refuses raises ``InputError``."""
    for alias in aliases:
        value = getattr(args, alias.dest, NOT_GIVEN)
        if value is NOT_GIVEN or (alias.repeat and value is None):
            continue
        if alias.repeat:
            value = tuple(value)
        *parents, name = alias.path
        section = _get(config, tuple(parents))
        try:
            check_leaf(alias.leaf, value)
            config = _put(config, tuple(parents), dataclasses.replace(section, **{name: value}))
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise InputError(f"{alias.flag}: {exc}") from None
    return config


# The model flags of translate, eval and serve
MODEL_ALIASES = (
    Alias("--asr-model", "pipeline.asr_model",
          "bundled model name or a CTranslate2 Whisper folder"),
    Alias("--voices-dir", "pipeline.voice_dirs",
          "extra folder with Piper .onnx + .onnx.json voices (repeatable)", repeat=True),
)


# -- what each leaf may be (the tables: ``speechpipe.config_ranges``) -------------------------


def leaf_range(leaf: str) -> Range:
    """The range of ``GROUP.FIELD``: declared in ``RANGES``; a leaf not (yet) declared there
    must be finite and keep the sign of its default (positive, or at least 0)."""
    declared = RANGES.get(leaf)
    if declared is not None:
        return declared
    group, _, name = leaf.partition(".")
    default = getattr(_get(Config(), GROUPS[group]), name)
    items = default if isinstance(default, tuple) else (default,)
    numbers = [v for v in items if isinstance(v, int | float) and not isinstance(v, bool)]
    return Range(0.0, open_low=True) if numbers and all(v > 0 for v in numbers) else Range(0.0)


def text_rule(leaf: str) -> Text:
    """The rule of the string leaf ``GROUP.FIELD``."""
    return TEXTS.get(leaf, Text())


def _literals() -> dict[str, tuple[object, ...]]:
    """``GROUP.FIELD`` -> the values of a ``Literal`` leaf."""
    out: dict[str, tuple[object, ...]] = {}
    for group, path in GROUPS.items():
        section = _get(Config(), path)
        hints = typing.get_type_hints(type(section))
        for name in settable_fields(section):
            if typing.get_origin(hints[name]) is typing.Literal:
                out[f"{group}.{name}"] = typing.get_args(hints[name])
    return out


LITERALS = _literals()


def check_leaf(leaf: str, value: object) -> None:
    """``ValueError`` when ``value`` may not be set at ``GROUP.FIELD``: a number that is NaN,
    infinite or out of its range, a string too long, with a control character or not of its
    pattern, a value a ``Literal`` leaf does not list, a tuple of more than ``MAX_ITEMS``.
    Booleans and None (off) pass."""
    name = leaf.partition(".")[2]
    if isinstance(value, tuple):
        if len(value) > MAX_ITEMS:
            raise ValueError(f"{name} takes at most {MAX_ITEMS} items (got {len(value)})")
        name += " items"
    choices = LITERALS.get(leaf)
    if choices is not None and value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))} "
                         f"(got {echoed(value)})")
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, str):
            text_rule(leaf).check(item, name)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            leaf_range(leaf).check(item, name)


def _catch_up_pairs(section: Any) -> str | None:
    if len(section.backlog_s) != len(section.speeds):
        return (f"catch_up.backlog_s and catch_up.speeds must be as long as each other (one "
                f"speed per backlog step; got {len(section.backlog_s)} and "
                f"{len(section.speeds)}): set both")
    return None


def _detect_among(section: Any) -> str | None:
    from speechpipe.models.mt.ct2_folder import WHISPER_LANGUAGES  # a table, no model

    unknown = [code for code in section.detect_among if code not in WHISPER_LANGUAGES]
    if unknown:
        shown = ", ".join(map(echoed, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
        return (f"asr.detect_among: {shown} not Whisper language "
                f"codes (lowercase ISO 639-1, such as es,en; Whisper knows "
                f"{' '.join(sorted(WHISPER_LANGUAGES))})")
    return None


# Rules across the leaves of one group, where one leaf alone cannot be judged (and string
# leaves a table checks).
GROUP_RULES: dict[str, Callable[[Any], str | None]] = {"catch_up": _catch_up_pairs,
                                                      "asr": _detect_among}


def check_group(group: str, section: Any) -> None:
    """``ValueError`` when the leaves of one group do not fit together."""
    rule = GROUP_RULES.get(group)
    problem = rule(section) if rule is not None else None
    if problem is not None:
        raise ValueError(problem)


def check_config(config: Config) -> None:
    """``check_leaf`` over every settable leaf of the tree (``InputError`` for the first
    leaf out of range)."""
    for group, path in GROUPS.items():
        section = _get(config, path)
        for name in settable_fields(section):
            try:
                check_leaf(f"{group}.{name}", getattr(section, name))
            except ValueError as exc:
                raise InputError(f"{group}.{name}: {exc}") from None
        try:
            check_group(group, section)
        except ValueError as exc:
            raise InputError(str(exc)) from None
