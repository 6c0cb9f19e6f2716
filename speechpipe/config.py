"""Every default in one place: one tree of frozen dataclasses.

``Config`` holds ``pipeline`` (``PipelineOptions``: what every session is built with) and
``server`` (``ServerOptions``: the server's limits and quotas, admission and the degrade
ladder, the cluster). Every scalar leaf can be set with ``--set GROUP.FIELD=VALUE``;
``GROUPS`` (derived from the tree: every option dataclass is a group, named by its field)
says where each group sits; ``speechpipe config`` prints the effective tree. Defaults live
only in the dataclasses. A shorthand flag (``--capacity 3``) is an ``Alias`` of one leaf
(``admission.capacity``): it defaults to ``None`` and, when given, writes that leaf, exactly
as ``--set`` would (``apply_aliases``).

Every module this one imports holds options (and pure cores) only: reading the tree loads
no server, no websockets library and no model.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from speechpipe.cluster.options import ClusterSettings
from speechpipe.errors import InputError, echoed
from speechpipe.models.apertium_options import ApertiumOptions
from speechpipe.models.batch_options import BatchOptions
from speechpipe.server.options import LoadOptions
from speechpipe.stages.asr_options import AsrOptions
from speechpipe.stages.catch_up_options import CatchUpOptions
from speechpipe.stages.faithfulness_options import FaithfulnessOptions
from speechpipe.stages.phrase_options import PhraseOptions
from speechpipe.stages.text_mt_options import TextMtOptions
from speechpipe.stages.vad_options import VadOptions
from speechpipe.transport.limits import ServerLimits
from speechpipe.voices.espeak_options import EspeakOptions
from speechpipe.voices.piper_options import PiperOptions

__all__ = [
    "Config", "PipelineOptions", "ServerOptions", "GROUPS", "apply_overrides", "with_overrides",
    "config_dict", "Alias", "add_aliases", "apply_aliases", "MODEL_ALIASES",
    "groups_of", "Range", "RANGES", "check_leaf", "leaf_range", "check_config", "check_group",
    "GROUP_RULES", "Text", "TEXTS", "text_rule", "MAX_ITEMS",
]


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """What the models are loaded with and every session is built with."""

    asr_model: str = "whisper-base"  # a bundled name, or a CTranslate2 Whisper folder
    asr_threads: int = 1  # CTranslate2 threads per ASR worker (docs/design.md)
    asr_encode_bucket_s: float = 1.0  # encode lengths are multiples of this (batching)
    # silence after the audio in every encoder input, at least (Whisper's encoder has no
    # padding mask: models/whisper_engine.py, docs/design.md "Batching")
    asr_trailing_silence_s: float = 1.0
    # least recently used dropped beyond it (models/prefill.py)
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
    # a text-MT update reads its forced prefix in one decoder pass (models/mt_prefill.py),
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
    # the Apertium rule-based MT backend (models/apertium.py): its hold and deadline
    apertium: ApertiumOptions = field(default_factory=ApertiumOptions)
    # the Piper engine's voices (voices/engines.py: an engine's options are the group of its
    # name); speaking rate 0.9: a little faster than the voices' own (< 1 is faster)
    piper: PiperOptions = field(default_factory=lambda: PiperOptions(length_scale=0.9))
    # espeak-ng's voices (voices/engines.py names the group): words per minute at speed 1
    espeak: EspeakOptions = field(default_factory=EspeakOptions)
    # numpy BLAS threads for the whole process, set by the CLI and server entry points before
    # they load the models (``apply_process_limits``); None leaves the process as it is.
    # ``Pipeline.load`` itself never changes process-wide settings.
    blas_threads: int | None = 1




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


# -- what each leaf may be ---------------------------------------------------------------------
def _number(value: int | float) -> str:
    """A number as a refusal shows it (an int of 400 digits does not fit ``:g``)."""
    if isinstance(value, int):
        digits = len(str(abs(value))) if abs(value) < 10 ** 4000 else 4000
        return str(value) if digits <= 20 else f"a {digits}-digit number"
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class Range:
    """The values one numeric leaf (or each item of a tuple leaf) may take: finite, at least
    ``low`` (more than ``low`` when ``open_low``), at most ``high``."""

    low: float | None = 0.0
    high: float | None = None
    open_low: bool = False

    def check(self, value: int | float, name: str = "the value") -> None:
        """``ValueError`` saying what is allowed, for a value outside the range."""
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number (got {value})")
        below = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        if below or (self.high is not None and value > self.high):
            raise ValueError(f"{name} must be {self} (got {_number(value)})")

    def __str__(self) -> str:
        low = "" if self.low is None else f"{'>' if self.open_low else '>='} {self.low:g}"
        high = "" if self.high is None else f"<= {self.high:g}"
        return " and ".join(part for part in (low, high) if part) or "any finite number"


def _r(low: float, high: float) -> Range:
    return Range(low, high)


def _pos(high: float) -> Range:
    """More than 0, at most ``high``: a size, interval, capacity or step (0 breaks every
    session: ``limits.outgoing_capacity=0`` did)."""
    return Range(0.0, high, open_low=True)


FRACTION = Range(0.0, 1.0)
_THREADS = _r(1, 256)  # a 20-digit thread count failed only once the model load began
_BEAM = _r(1, 16)  # beam 100000 reached 5.7 GB in 11 s
_AGREE = _r(1, 16)  # LocalAgreement-n
_WORDS = _r(0, 1000)
_COUNT = _r(0, 1_000_000)
_DAY = 86_400.0
_WINDOW = 30.0  # Whisper hears 30 s at most

# Every numeric leaf's range, declared here (``tests/app/test_config_bounds.py`` holds every
# leaf of the tree to one with both ends): finite, no lower than what works (0 only where it
# means "off", "none" or "all"), no higher than a value still sane on one machine, so that no
# flag, file or ``--set`` can hand an engine a beam of 100000 or a step of 1e308.
RANGES: dict[str, Range] = {
    # pipeline
    "pipeline.asr_threads": _THREADS,
    "pipeline.mt_threads": _THREADS,
    "pipeline.blas_threads": _THREADS,
    "pipeline.asr_encode_bucket_s": _pos(_WINDOW),
    "pipeline.asr_trailing_silence_s": _pos(10.0),
    "pipeline.asr_restricted_cache_mb": _pos(65_536),
    "pipeline.phrase_cache_items": _pos(1_000_000),
    "pipeline.translation_memory_items": _pos(1_000_000),
    "pipeline.input_capacity_frames": _pos(90_000),  # 30 minutes of 20 ms frames
    "pipeline.fast_input_capacity_frames": _pos(1500),
    # catch_up
    "catch_up.backlog_s": _pos(60.0),
    "catch_up.speeds": _r(0.5, 2.0),
    "catch_up.span_s": _r(0, 60),
    "catch_up.ramp_s": _pos(60.0),
    "catch_up.max_speed": _r(1.0, 2.0),  # 1: the span never speeds the voice up
    "catch_up.finish_speed": _r(1.0, 2.0),  # 1: no faster finish
    "catch_up.speed_step": _r(0, 0.5),  # 0: rates are not rounded
    # vad
    "vad.aggressiveness": _r(0, 3),  # webrtcvad's modes
    "vad.start_window_ms": _pos(5000),
    "vad.start_ratio": Range(0.0, 1.0, open_low=True),
    "vad.pause_ms": _pos(10_000),
    "vad.hush_ms": _r(0, 10_000),  # 0: no decode ahead of a pause
    "vad.hangover_ms": _pos(10_000),
    "vad.max_utterance_s": _pos(300.0),
    "vad.soft_max_utterance_s": _pos(300.0),
    # asr
    "asr.step_s": _pos(_WINDOW),
    "asr.early_step_s": _pos(_WINDOW),
    "asr.early_words": _r(0, 100),  # 0: no early steps
    "asr.caption_step_s": _r(0, _WINDOW),
    "asr.min_voiced_s": _r(0, _WINDOW),
    "asr.agreement": _AGREE,
    "asr.target_agreement": _AGREE,
    "asr.target_first_words": _pos(100),
    "asr.agreement_lookback": _r(1, 16),
    "asr.pause_commit_margin_s": _r(0, 5),
    "asr.beam_size": _BEAM,
    "asr.final_beam_size": _BEAM,
    "asr.tokens_per_second": _pos(50.0),
    "asr.language_lock_s": _r(0, _WINDOW),
    "asr.language_confident": _r(0, 2),  # above 1: never early
    "asr.language_min_s": _r(0, _WINDOW),
    "asr.pre_roll_s": _r(0, 5),
    "asr.min_utterance_voiced_s": _r(0, _WINDOW),
    "asr.partial_max_new_tokens": _pos(448),  # Whisper's text context
    "asr.vocabulary_words": _r(0, 200_000),  # 0: the full vocabulary
    "asr.align_margin_s": _r(0, _WINDOW),
    "asr.settle_margin_s": _r(0, 10),  # 0: agreement alone
    "asr.opening_settle_s": _r(0, 10),
    "asr.max_window_s": _pos(_WINDOW),
    "asr.cut_grace_s": _r(0, _WINDOW),
    "asr.context_tokens": _pos(224),  # Whisper's prompt: half its text context
    "asr.shown_tentative_words": _r(0, 1000),  # 0: all
    # phrases
    "phrases.first_words": _pos(100),
    "phrases.max_words": _pos(100),
    "phrases.min_words_at_punctuation": _r(0, 100),
    "phrases.lead_s": _r(0, 60),
    "phrases.max_wait_words": _pos(1000),
    "phrases.min_words": _pos(100),
    "phrases.first_min_words": _pos(100),
    "phrases.hold_silence_s": _r(0, 60),  # 0: a lone word may go once the output is silent
    "phrases.hold_wait_s": _r(0, 60),
    "phrases.first_hold_wait_s": _pos(60.0),
    "phrases.continuation_tail_s": _pos(10.0),  # 10: all of it
    # batching
    "batching.window_s": _r(0, 1),  # 0: no gathering window
    "batching.max_batch": _pos(64),
    "batching.partial_deadline_s": _pos(60.0),
    "batching.workers": _pos(64),
    "batching.group_min_queue": _r(0, 1000),
    "batching.final_deadline_s": _pos(60.0),
    "batching.opening_deadline_s": _pos(60.0),
    "batching.greedy_partials_backlog": _r(0, 1000),  # 0: never greedy
    "batching.urgent_workers": _r(0, 64),  # 0: no urgent lane (models.asr_lanes)
    "batching.background_nice": _r(1, 19),
    # faithful
    "faithful.min_speech_s": _r(0, _WINDOW),
    "faithful.speech_threshold": FRACTION,
    "faithful.words_per_speech_s": _pos(100.0),
    "faithful.extra_words": _WORDS,
    "faithful.target_per_source_word": _pos(100.0),
    "faithful.target_extra_words": _WORDS,
    "faithful.min_ratio": FRACTION,
    "faithful.min_source_words": _WORDS,
    "faithful.max_recoveries": _r(0, 16),  # 0: never translate again
    # text_mt
    "text_mt.agreement": _AGREE,
    "text_mt.hold_words": _r(0, 100),  # 0: LocalAgreement-n
    "text_mt.beam_size": _BEAM,
    "text_mt.min_segment_words": _pos(1000),
    "text_mt.clause_min_words": _pos(1000),
    "text_mt.max_segment_words": _pos(1000),
    "text_mt.open_new_tokens": _r(0, 1024),  # 0: up to the length cap
    # apertium, piper, espeak
    "apertium.hold_words": _r(1, 12),
    "apertium.deadline_s": _r(0.05, 60),
    "piper.intra_op_threads": _THREADS,
    "piper.length_scale": _r(0.1, 5.0),  # > 1 slower; 1e308 ended in a traceback
    "piper.noise_scale": _r(0, 5),
    "piper.noise_w_scale": _r(0, 5),
    "piper.volume": _pos(10.0),
    "piper.seed": _r(0, 2**31 - 1),
    "espeak.rate_wpm": _r(80, 450),  # espeak-ng's own bounds
    # limits
    "limits.max_message_bytes": _pos(16 << 20),
    "limits.start_timeout_s": _pos(3600.0),
    "limits.max_lead_s": _pos(600.0),
    "limits.outgoing_capacity": _pos(100_000),
    "limits.webrtc_connect_timeout_s": _pos(600.0),
    "limits.ping_interval_s": _pos(3600.0),
    "limits.ping_timeout_s": _pos(3600.0),
    "limits.close_timeout_s": _pos(600.0),
    "limits.shutdown_grace_s": _r(0, 3600),
    "limits.max_unread_bytes": _pos(1 << 30),
    "limits.read_check_s": _pos(3600.0),
    # quotas
    "quotas.max_session_s": _pos(7 * _DAY),
    "quotas.expire_grace_s": _r(0, 3600),
    "quotas.max_idle_s": _pos(_DAY),
    "quotas.messages_per_s": _pos(100_000),
    "quotas.message_burst": _pos(1_000_000),
    "quotas.control_frames_per_s": _pos(10_000),
    "quotas.control_frame_burst": _pos(100_000),
    "quotas.max_sdp_bytes": _pos(1 << 20),
    "quotas.max_sessions_per_token": _r(0, 100_000),  # 0: no limit
    "quotas.max_sessions_per_ip": _r(0, 100_000),
    "quotas.audio_window_s": _pos(3600.0),
    "quotas.min_audio_ratio": FRACTION,  # 0: the pace rule is off
    # rooms
    "rooms.max_listeners_per_room": _COUNT,  # 0: no limit
    "rooms.max_listeners": _COUNT,  # 0: no limit
    "rooms.outbox_capacity": _pos(100_000),
    "rooms.listener_send_buffer": _pos(64 << 20),
    "rooms.history_s": _pos(_DAY),
    "rooms.history_items": _pos(100_000),
    "rooms.echo_tail_s": _r(0, 60),
    "rooms.echo_report_tail_s": _r(0, 60),
    "rooms.echo_max_lag_s": _r(0, 60),  # 0: a reported playout never runs later
    "rooms.captions_kept": _COUNT,  # 0: a room keeps no captions (captions.vtt empty)
    "rooms.join_per_ip_s": _r(0, 1_000_000),  # 0: no per-address join limit
    "rooms.join_ip_burst": _r(1, 1_000_000),
    "rooms.join_per_room_s": _r(0, 1_000_000),  # 0: no per-room join limit
    "rooms.join_room_burst": _r(1, 1_000_000),
    # load, admission, degrade
    "load.tick_s": _pos(60.0),
    "load.latency_window_s": _pos(3600.0),
    "admission.capacity": _r(1, 100_000),
    "admission.max_queue": _r(0, 100_000),  # 0: no waiting line
    "admission.max_wait_s": _r(0, 3600),
    "admission.per_client": _r(0, 100_000),  # 0: no per-client limit
    "admission.expected_session_s": _pos(_DAY),
    "admission.min_retry_s": _pos(3600.0),
    "admission.status_interval_s": _pos(3600.0),
    "degrade.up_latency_s": _pos(60.0),
    "degrade.up_lag_s": _pos(60.0),
    "degrade.up_load_ratio": _pos(100.0),
    "degrade.down_latency_s": _pos(60.0),
    "degrade.down_lag_s": _pos(60.0),
    "degrade.down_load_ratio": _pos(100.0),
    "degrade.up_after_s": _pos(3600.0),
    "degrade.severe_factor": _pos(100.0),
    "degrade.down_after_s": _pos(3600.0),
    "degrade.max_level": _r(0, 16),  # 0: the ladder never steps down
    "degrade.busy_load_ratio": _r(0, 100),  # 0: no level ahead of the queue
    "degrade.busy_level": _r(0, 16),
    # cluster
    "cluster.drain_deadline_s": _pos(_DAY),
    "cluster.lease_s": _pos(3600.0),
    "cluster.resume_window_s": _pos(_DAY),
}
MAX_ITEMS = 64  # items of one tuple leaf (speeds, voice folders, origins, ...)


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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Text:
    """What one string leaf (or each item of a tuple leaf) may be: at most ``max_chars``
    characters, no control character, matching ``pattern`` (whole) when given; a ``path``
    has no component longer than 255 characters (what a file system takes)."""

    max_chars: int = 256
    pattern: str | None = None
    what: str = ""  # what a value looks like, for the refusal
    path: bool = False

    def check(self, value: str, name: str = "the value") -> None:
        """``ValueError`` saying what is allowed, for a string this leaf may not hold."""
        like = f" ({self.what})" if self.what else ""
        if len(value) > self.max_chars:
            raise ValueError(f"{name} must be at most {self.max_chars} characters{like} "
                             f"(got {len(value)})")
        if _CONTROL.search(value):
            raise ValueError(f"{name} must not hold control characters (got {echoed(value)})")
        if self.pattern is not None and value and not re.fullmatch(self.pattern, value):
            looks = self.what or f"of the form {self.pattern}"
            raise ValueError(f"{name} must be {looks} (got {echoed(value)})")
        if self.path and any(len(part) > 255 for part in value.split("/")):
            raise ValueError(f"{name}: a path component is over 255 characters")


_PATH = Text(4096, what="a path", path=True)
_CHOICE = Text(32, r"[a-z_]+", "a lowercase word")

# Every string leaf's rule; where a string becomes a path, a file name, a model or engine
# name or a header, a pattern too. Leaves not listed get ``Text()``: 256 characters.
TEXTS: dict[str, Text] = {
    "pipeline.asr_model": Text(4096, what="a bundled model name or a folder", path=True),
    "pipeline.voice_dirs": _PATH,
    "catch_up.mode": _CHOICE,
    "catch_up.source_time": _CHOICE,
    "asr.detect_among": Text(8, r"[a-z]{2,3}", "a Whisper language code such as es"),
    "phrases.cut": _CHOICE,
    "phrases.no_end_words": Text(1024, what="space-separated words"),
    "apertium.warm": Text(16, r"[a-z]{2,3}-[a-z]{2,3}", "a pair such as en-es"),
    "espeak.variant": Text(16, r"[A-Za-z0-9]+", "a variant name such as m3 or klatt"),
    "limits.token": Text(1024),
    "limits.allowed_origins": Text(2048, what="an origin such as https://example.com"),
    "limits.allowed_hosts": Text(255, what="a host name"),
    "quotas.client_ip_header": Text(64, r"[!#$%&'*+.^_`|~0-9A-Za-z-]+",
                                    "an HTTP header name such as X-Forwarded-For"),
    "rooms.mt": Text(4096, what="ct2:NAME_OR_PATH", path=True),
    "cluster.address": Text(512, r"\S+", "HOST:PORT"),
    "cluster.public_url": Text(2048, r"\S+", "a ws:// or wss:// URL"),
}


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
    from speechpipe.models.ct2_folder import WHISPER_LANGUAGES  # a table, no model

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
