"""Every leaf of the options tree is checked when it is set (issue 21, item 12): NaN,
infinities and values outside a leaf's range are refused with one line and exit 2 before any
model loads, instead of a traceback mid-run (``asr.step_s=nan``) or sessions that all fail
(``limits.outgoing_capacity=0`` -> 1011, ``limits.ping_interval_s=-1`` -> 4008,
``limits.max_unread_bytes=-1`` -> ``/readyz`` silent, ``limits.max_message_bytes=0`` -> 1009).
The command line's refusals, in a subprocess: tests/cli/config.
"""

from __future__ import annotations

import math
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechpipe.config import (
    GROUPS,
    Config,
    _get,
    apply_overrides,
    check_config,
    leaf_range,
    settable_fields,
)
from speechpipe.errors import InputError


def numeric_leaves() -> dict[str, type]:
    """``GROUP.FIELD`` -> int or float, for every number (or tuple of numbers) in the tree."""
    out: dict[str, type] = {}
    config = Config()
    for group, path in GROUPS.items():
        section = _get(config, path)
        hints = typing.get_type_hints(type(section))
        for name in settable_fields(section):
            hint = hints[name]
            args = typing.get_args(hint) or (hint,)
            if typing.get_origin(hint) is tuple:
                args = (args[0],)
            kinds = [a for a in args if a in (int, float)]
            if kinds:
                out[f"{group}.{name}"] = kinds[0]
    return out


LEAVES = numeric_leaves()


def test_the_tree_has_numeric_leaves_everywhere_and_its_defaults_pass() -> None:
    groups = {leaf.partition(".")[0] for leaf in LEAVES}
    assert {"asr", "limits", "quotas", "admission", "degrade", "vad", "pipeline"} <= groups
    assert len(LEAVES) > 80
    check_config(Config())


@pytest.mark.parametrize("override", [
    "asr.step_s=nan", "asr.step_s=inf", "asr.step_s=-inf", "asr.step_s=0",
    "limits.outgoing_capacity=0", "limits.ping_interval_s=-1", "limits.max_unread_bytes=-1",
    "limits.max_message_bytes=0", "limits.ping_timeout_s=nan", "quotas.min_audio_ratio=1.5",
    "vad.aggressiveness=4", "catch_up.speeds=1.1,nan", "admission.capacity=0",
])
def test_the_issues_values_are_refused_in_one_line(override: str) -> None:
    with pytest.raises(InputError) as info:
        apply_overrides(Config(), [override])
    message = str(info.value)
    assert override.partition("=")[0].partition(".")[2] in message and "\n" not in message


def test_catch_up_steps_come_in_pairs() -> None:
    """One speed per backlog step: unequal lengths stopped every session's speech
    (``zip(strict=True)`` in ``stages.tts.catch_up_speed``)."""
    with pytest.raises(InputError, match="as long as each other"):
        apply_overrides(Config(), ["catch_up.backlog_s=1,2,3"])
    with pytest.raises(InputError, match="as long as each other"):
        apply_overrides(Config(), ["catch_up.speeds="])
    config = apply_overrides(Config(), ["catch_up.backlog_s=1,2,3",
                                        "catch_up.speeds=1.1,1.2,1.3"])
    assert len(config.pipeline.catch_up.speeds) == 3, "both set together is fine"


def test_detection_among_languages_takes_whisper_codes_only() -> None:
    """``asr.detect_among`` (issue 47): a code Whisper does not know would make the
    detection choose among nothing; refused in one line naming it."""
    with pytest.raises(InputError, match="'xx' not Whisper language codes") as info:
        apply_overrides(Config(), ["asr.detect_among=de,xx"])
    assert "\n" not in str(info.value)
    config = apply_overrides(Config(), ["asr.detect_among=de,en"])
    assert config.pipeline.asr.detect_among == ("de", "en")
    assert apply_overrides(Config(), ["asr.detect_among="]).pipeline.asr.detect_among == ()


@pytest.mark.parametrize("override", [
    "quotas.min_audio_ratio=0", "admission.max_queue=0", "limits.ping_interval_s=none",
    "quotas.max_sessions_per_ip=0", "batching.window_s=0", "degrade.max_level=0",
    "asr.step_s=0.25", "limits.outgoing_capacity=1",
])
def test_values_that_mean_off_or_are_small_but_valid_still_work(override: str) -> None:
    check_config(apply_overrides(Config(), [override]))


def _text(value: float, kind: type) -> str:
    return str(int(value)) if kind is int and math.isfinite(value) else repr(value)


@st.composite
def out_of_range(draw: st.DrawFn) -> tuple[str, str]:
    leaf = draw(st.sampled_from(sorted(LEAVES)))
    kind, allowed = LEAVES[leaf], leaf_range(leaf)
    choices = [st.sampled_from([math.nan, math.inf, -math.inf])] if kind is float else []
    if allowed.low is not None:
        below = allowed.low if allowed.open_low else allowed.low - (1 if kind is int else 1e-9)
        choices.append(st.floats(min_value=-1e12, max_value=below, allow_nan=False))
    if allowed.high is not None:
        above = allowed.high + (1 if kind is int else 1e-6)
        choices.append(st.floats(min_value=above, max_value=1e12, allow_nan=False))
    value = draw(st.one_of(*choices))
    if kind is int and math.isfinite(value):
        value = math.floor(value) if allowed.low is not None and value <= allowed.low else value
    return leaf, _text(value, kind)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(out_of_range())
def test_every_leaf_refuses_what_is_outside_its_range(case: tuple[str, str]) -> None:
    leaf, text = case
    with pytest.raises(InputError, match=leaf.partition(".")[2]):
        apply_overrides(Config(), [f"{leaf}={text}"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(LEAVES)), st.floats(min_value=-1e6, max_value=1e6) | st.just(
    math.nan))
def test_every_leaf_takes_any_value_with_a_clear_answer(leaf: str, value: float) -> None:
    """Whatever is set, the tree either takes it (and then passes the check) or refuses it
    with ``InputError``: never another exception, which the CLI would print as a traceback."""
    try:
        config = apply_overrides(Config(), [f"{leaf}={_text(value, LEAVES[leaf])}"])
    except InputError:
        return
    check_config(config)
