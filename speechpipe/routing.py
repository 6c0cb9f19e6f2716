"""What a session request resolves to, checked without loading a model: its languages, the
MT route and the backend's policy, and the engines a listener is told about.

``speechpipe.session`` builds sessions from these; the CLI checks a request here before any
model loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from speechpipe.errors import InputError, LanguageError
from speechpipe.models.mt.backends import (
    SharedTranslator,
    backend_of,
    backend_pairs,
    backend_usage,
)
from speechpipe.models.mt.ct2_folder import WHISPER_LANGUAGES
from speechpipe.models.mt.pivot import ByLanguage, PivotTranslation
from speechpipe.models.mt.routes import MtRoute, choose_route, pull_hint
from speechpipe.stages.asr import AsrOptions
from speechpipe.stages.language_names import language_hint
from speechpipe.stages.request import SessionRequest
from speechpipe.stages.text_mt_options import TextMtOptions
from speechpipe.voices.engines import ENGINES
from speechpipe.voices.registry import VoiceInfo

__all__ = [
    "MAX_OUTPUT_RATE", "MIN_OUTPUT_RATE", "ResolvedRequest", "TextTranslator",
    "check_output_rate", "check_request", "describe_engines", "mt_policy", "mt_route",
    "request_route",
]

# what a session's text MT is: one backend's shared worker (CTranslate2's or another's:
# ``models.mt.backends``), two CT2 models through English, or one per detected language
TextTranslator = SharedTranslator | PivotTranslation | ByLanguage

MIN_OUTPUT_RATE = 8_000
MAX_OUTPUT_RATE = 48_000


def check_output_rate(rate: int) -> None:
    """Raise ``InputError`` if ``rate`` is outside the supported output rates."""
    if not MIN_OUTPUT_RATE <= rate <= MAX_OUTPUT_RATE:
        raise InputError(f"output sample rate {rate} outside "
                         f"{MIN_OUTPUT_RATE}..{MAX_OUTPUT_RATE} Hz")


def check_request(request: SessionRequest) -> tuple[str, str]:
    """What a request can be checked for without models: language codes (Whisper's), the MT
    backend and the output rate. Returns (source, target), normalized. The CLI calls it
    (and ``resolve_voice``) before loading models; ``Pipeline.resolve`` calls it first."""
    source = request.source_lang.strip().lower()
    if source != "auto" and source not in WHISPER_LANGUAGES:
        hint = language_hint(source)
        raise LanguageError(f"unknown source language {source!r}: " + (
            f"{hint}; or auto to detect it" if hint
            else "Whisper knows " + " ".join(sorted(WHISPER_LANGUAGES)) + ", or auto"))
    target = request.target_lang.strip().lower()
    if target not in WHISPER_LANGUAGES:
        hint = language_hint(target)
        raise LanguageError(f"unknown target language {target!r}: "
                            + (hint or "use an ISO 639-1 code such as en, de or fr"))
    if request.mt == "whisper":
        if target != "en":
            raise LanguageError(
                f"target language {target!r} needs a text MT model: --mt whisper translates "
                f"to English only; {pull_hint(target)}, then use --mt auto"
            )
    elif request.mt == "auto":
        mt_route(source, target)  # one clear line naming `models pull` when no route exists
    elif (backend := backend_of(request.mt)) is not None:
        backend.load().check(request.mt)
    elif not request.mt.startswith("ct2:"):
        usage = ["auto", "whisper", "ct2:MODEL", *backend_usage()]
        raise InputError(f"unknown MT backend {request.mt!r} "
                         f"(use {', '.join(usage[:-1])} or {usage[-1]})")
    check_output_rate(request.output_sample_rate)
    return source, target


def mt_route(source: str, target: str) -> MtRoute:
    """``--mt auto``'s route for a normalized pair, from the installed models
    (``speechpipe.models.mt.routes``)."""
    from speechpipe.models.mt.registry import registered_mt_models

    pairs = {direction: hop for direction, (_, hop) in backend_pairs().items()}
    return choose_route(source, target, registered_mt_models(), pairs)


def request_route(request: SessionRequest, source: str, target: str) -> MtRoute:
    """The route a checked request runs: ``--mt whisper``, ``--mt ct2:X`` and a backend's
    ``--mt NAME:PAIR`` name theirs."""
    if request.mt == "whisper":
        return MtRoute("whisper")
    if request.mt.startswith("ct2:"):
        return MtRoute("text", (request.mt.removeprefix("ct2:"),))
    if backend_of(request.mt) is not None:
        return MtRoute("text", (request.mt,))
    return mt_route(source, target)


def mt_policy(translator: TextTranslator, base: TextMtOptions) -> TextMtOptions:
    """The incremental policy a session's text MT runs under: the backend's own where it
    has one (a rule-based one: hold-N, no forced prefix to agree on), else ``text_mt.*``."""
    own = getattr(translator, "policy", None)
    return own(base) if callable(own) else base


def describe_engines(resolved: ResolvedRequest) -> dict[str, str]:
    """What translates and what speaks a session, labelled honestly (the CLI's ``engines:``
    line and the server's ``started`` event); names only, nothing spoken."""
    route = resolved.route

    def hop(name: str) -> str:
        backend = backend_of(name)
        if backend is not None:
            return backend.load().describe(name)
        return f"neural MT (CTranslate2 {name.rsplit('/', 1)[-1]})"

    if route.kind == "whisper":
        mt = "Whisper translate (neural, speech to English)"
    elif route.kind == "whisper+text":
        mt = f"Whisper translate to English, then {hop(route.hops[0])}"
    else:
        mt = " then ".join(hop(name) for name in route.hops)
    engines = {"mt": mt}
    voice = resolved.voice
    if voice is not None:
        entry = ENGINES.get(voice.engine)
        label = entry.description if entry is not None and entry.description else (
            f"{voice.engine} voice")
        engines["voice"] = f"{label} {voice.name}"
    return engines


@dataclass(frozen=True, slots=True)
class ResolvedRequest:
    """A validated request: languages, voice, ASR options and the text-MT worker."""
    request: SessionRequest
    source_lang: str | None  # None: detect per utterance
    voice: VoiceInfo | None  # None: captions only (``SessionRequest.speech`` off)
    asr: AsrOptions
    text_mt: TextTranslator | None = None  # None: Whisper's only
    route: MtRoute = MtRoute("whisper")
