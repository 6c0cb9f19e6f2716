"""Every option has a bound where it enters (issue 74, "values out of range reach the
engines"; "noise instead of one line"): each number a declared range with an upper end,
each string a length cap and no control character (paths and names a pattern), nested TOML
refused, and a refusal echoes at most ~80 characters of what it was given. All checked by
``--set``, the shorthand flags and ``--config`` alike, before any model loads, exit 2 (the
command line's refusals, in a subprocess: tests/cli/config).
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from speechpipe.config import (
    GROUPS,
    RANGES,
    Config,
    _get,
    apply_overrides,
    check_config,
    settable_fields,
    text_rule,
)
from speechpipe.config_file import load_config_file
from speechpipe.errors import ECHO_CHARS, InputError, echoed

HUGE = "9" * 100_000  # one argv string may hold 128 KiB


def _short(value: object) -> str:
    return echoed(value, 40)


def _echoes_little(message: str) -> bool:
    """One line that repeats no more than ~80 characters of a value (the list of a group's
    options it may name is not an echo)."""
    longest_run = max((len(m.group()) for m in re.finditer(r"(.)\1*", message)), default=0)
    return "\n" not in message and longest_run < 100 and len(message) < 2000


def _leaves() -> dict[str, typing.Any]:
    """``GROUP.FIELD`` -> its type hint, for every settable leaf."""
    out = {}
    for group, path in GROUPS.items():
        section = _get(Config(), path)
        hints = typing.get_type_hints(type(section))
        for name in settable_fields(section):
            out[f"{group}.{name}"] = hints[name]
    return out


LEAVES = _leaves()


def _kinds(hint: typing.Any) -> set[type]:
    args = typing.get_args(hint) or (hint,)
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(args[0]) or (args[0],)
    if typing.get_origin(hint) is typing.Literal:
        return {typing.Literal}  # type: ignore[arg-type]
    return {a for a in args if a is not type(None)}


NUMBERS = sorted(leaf for leaf, hint in LEAVES.items() if _kinds(hint) & {int, float})
STRINGS = sorted(leaf for leaf, hint in LEAVES.items() if _kinds(hint) == {str})


def test_every_leaf_is_a_bool_an_enum_a_bounded_number_or_a_capped_string() -> None:
    """The systematic check: no leaf of the tree is left without a bound, and a leaf added
    later fails here until it declares one."""
    assert len(NUMBERS) > 150 and len(STRINGS) >= 10
    for leaf, hint in LEAVES.items():
        kinds = _kinds(hint)
        if kinds <= {bool} or kinds == {typing.Literal}:
            continue
        if kinds & {int, float}:
            assert leaf in RANGES, f"{leaf}: no declared range (config.RANGES)"
            allowed = RANGES[leaf]
            assert allowed.low is not None and allowed.high is not None, f"{leaf}: {allowed}"
        else:
            assert kinds == {str}, leaf
            assert text_rule(leaf).max_chars <= 4096, leaf


@pytest.mark.parametrize("leaf", NUMBERS)
def test_every_number_refuses_a_20_digit_value(leaf: str) -> None:
    with pytest.raises(InputError, match="must be") as info:
        apply_overrides(Config(), [f"{leaf}=99999999999999999999"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("leaf", STRINGS)
def test_every_string_refuses_100k_characters_and_control_characters(leaf: str) -> None:
    for value in ("a" * 100_000, "a\x00b", "a\x1bb"):
        with pytest.raises(InputError) as info:
            apply_overrides(Config(), [f"{leaf}={value}"])
        assert _echoes_little(str(info.value)), str(info.value)[:3000]


@pytest.mark.parametrize("override", [
    "asr.beam_size=100000", "asr.final_beam_size=100000", "text_mt.beam_size=1000",
    "asr.step_s=1e308", "piper.length_scale=1e308", "piper.noise_scale=1e308",
    "pipeline.asr_threads=99999999999999999999", "asr.partial_max_new_tokens=100000",
    "asr.beam_size=1" + "0" * 400,  # past float's range: OverflowError, not ValueError
    "catch_up.speeds=" + ",".join(["1.1"] * 1000),  # a tuple has a length too
    "pipeline.asr_inplace_step=sometimes",  # a Literal takes only its values
    "espeak.variant=../../etc/passwd",
    "apertium.warm=../x",
    "quotas.client_ip_header=X-Forwarded-For: evil",
], ids=_short)
def test_the_issues_values_are_refused_in_one_line(override: str) -> None:
    with pytest.raises(InputError) as info:
        apply_overrides(Config(), [override])
    message = str(info.value)
    assert _echoes_little(message), message[:3000]


@pytest.mark.parametrize("override", [
    "asr.shown_tentative_words=0",  # "0: all" (its comment and __post_init__)
    "batching.greedy_partials_backlog=0",  # "0: never"
    "asr.beam_size=16", "pipeline.asr_threads=64", "piper.length_scale=2.5",
    "pipeline.asr_model=/opt/models/whisper-large-v3 ct2", "apertium.warm=en-es,fr-es",
    "quotas.client_ip_header=X-Forwarded-For", "pipeline.voice_dirs=~/voices,/srv/voices",
    "limits.allowed_origins=https://example.com", "rooms.mt=ct2:opus-en-de",
])
def test_sane_values_still_pass(override: str) -> None:
    check_config(apply_overrides(Config(), [override]))


@pytest.mark.parametrize("override", [
    "asr.beam_size=" + HUGE, "asr.nope=" + HUGE, "nope.x=" + HUGE, HUGE,
    "asr.detect_among=" + ",".join(["xx"] * 50_000), "pipeline.asr_model=" + "a" * 200_000,
    "catch_up.speeds=" + HUGE,
], ids=_short)
def test_a_refusal_echoes_at_most_a_short_part_of_the_value(override: str) -> None:
    with pytest.raises(InputError) as info:
        apply_overrides(Config(), [override])
    assert _echoes_little(str(info.value)), str(info.value)[:3000]


def test_the_echo_helper_cuts_long_values_with_an_ellipsis() -> None:
    assert echoed("es") == "'es'"
    assert echoed("a\nb") == "'a\\nb'"
    cut = echoed("x" * 10_000)
    assert len(cut) == ECHO_CHARS and cut.endswith("…")
    assert echoed("/some/path", quote=False) == "/some/path"
    assert len(echoed("/p" * 5000, quote=False)) == ECHO_CHARS


@pytest.mark.parametrize("text", [
    "[pipeline]\nasr_model = " + "[" * 5000 + "]" * 5000 + "\n",
    "[pipeline]\nasr_model = " + "{a=" * 5000 + "1" + "}" * 5000 + "\n",
    "[pipeline.asr]\ndetect_among = [[[[\"es\"]]]]\n",  # a leaf is a value or a flat list
    "[pipeline.asr]\n" + "x" * 100_000 + " = 1\n",  # its key echoed in ~80 characters
    "[" + ".".join(["pipeline"] * 5000) + "]\nx = 1\n",
], ids=_short)
def test_a_nested_or_huge_config_file_is_refused_in_one_short_line(tmp_path: Path,
                                                                   text: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_config_file(path)
    message = str(info.value)
    assert message.startswith(f"--config {path}: ") and _echoes_little(message), message[:3000]
