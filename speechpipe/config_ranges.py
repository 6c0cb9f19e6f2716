"""What each option may be: the range of every numeric leaf (``RANGES``) and the rule of
every string leaf (``TEXTS``), as data, with the value types that check one value (``Range``,
``Text``). ``speechpipe.config`` applies them to the tree (``check_leaf``, ``check_config``);
``tests/unit/config/test_config_bounds.py`` holds every leaf of the tree to one. Pure: no
option dataclass is imported here; an engine's options declare their bounds on their own
fields (``metadata``), and the tree adds them to these."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from speechpipe.errors import echoed

__all__ = ["Range", "RANGES", "FRACTION", "MAX_ITEMS", "Text", "TEXTS"]


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

# Every numeric leaf's range, declared here (``tests/unit/config/test_config_bounds.py`` holds every
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
    "batching.urgent_workers": _r(0, 64),  # 0: no urgent lane (models.workers.asr_lanes)
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
    # the engines' groups (piper, espeak, apertium, ...) declare theirs on their fields
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
    "limits.token": Text(1024),
    "limits.allowed_origins": Text(2048, what="an origin such as https://example.com"),
    "limits.allowed_hosts": Text(255, what="a host name"),
    "quotas.client_ip_header": Text(64, r"[!#$%&'*+.^_`|~0-9A-Za-z-]+",
                                    "an HTTP header name such as X-Forwarded-For"),
    "rooms.mt": Text(4096, what="ct2:NAME_OR_PATH", path=True),
    "cluster.address": Text(512, r"\S+", "HOST:PORT"),
    "cluster.public_url": Text(2048, r"\S+", "a ws:// or wss:// URL"),
}
