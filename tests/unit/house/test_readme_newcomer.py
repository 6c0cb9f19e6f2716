"""What a newcomer meets first (issue 21, item 16): the README's quick start, the usage block
(``docs/usage.md``) and the nginx example (``docs/serving.md``), and the detected language in
``translate``'s trace (``.gitignore``: the cli tier; ``translate``'s summary on the real
models: the slow tier)."""

from __future__ import annotations

import re

from speechpipe.evaluation.trace import (
    TraceBuilder,
    source_language_confidence,
    source_languages,
)
from speechpipe.stages.frames import TextHypothesis, UtteranceEnd
from speechpipe.transport.file_replay import ReplayEvent
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
USAGE = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
SERVING = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    return README.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def test_quick_start_is_two_commands_in_a_virtual_environment_on_python_3_11() -> None:
    quick = section("Quick start")
    (block,) = sh_blocks(quick)
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2, commands
    assert commands[0].startswith("python3 -m venv .venv && . .venv/bin/activate && pip install .")
    assert "speechpipe translate samples/wav/es_gato.wav --out translated.wav" in commands[0]
    assert commands[1].startswith("pip install -e '.[test]'")
    assert "Python 3.11" in quick and "PEP 668" in quick
    assert re.search(r"\d+ minutes", quick), "says how long the test command takes"
    assert "TESTS_TAKE" not in quick
    requires = re.search(r'requires-python = ">=(\d+\.\d+)"',
                         (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert requires is not None and requires.group(1) == "3.11"


def test_every_flag_the_docs_use_is_in_the_usage_block() -> None:
    usage = sh_blocks(USAGE.split("## Commands", 1)[1])[0]
    listed = set(re.findall(r"--[a-z][a-z-]+", usage))
    used: set[str] = set()
    for block in sh_blocks(README) + sh_blocks(USAGE) + sh_blocks(SERVING):
        if block != usage:
            used |= set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", block))
    assert {"--new-secret", "--client-ip-header"} <= used
    assert used - listed == set()


def test_start_and_end_offset_are_defined_where_translate_is_described() -> None:
    usage = section("Usage")
    assert re.search(r"\*\*StartOffset\*\*: from the start of the speech", usage)
    assert re.search(r"\*\*EndOffset\*\*: from the end of the speech", usage)


def test_the_nginx_example_keeps_metrics_private() -> None:
    (nginx,) = re.findall(r"```nginx\n(.*?)```", SERVING, re.S)
    private = re.search(r"location\s*=\s*/metrics\s*\{([^}]*)\}", nginx)
    assert private is not None and re.search(r"return 404;|deny all;", private.group(1))
    assert nginx.index("location = /metrics") < nginx.index("location / {")


def test_the_trace_records_each_utterances_language() -> None:
    builder = TraceBuilder(16000)
    for utterance, language in ((0, "de"), (1, "de"), (2, "la")):
        for side, text, lang in (("source", "wort", language), ("target", "word", "en")):
            builder.add(ReplayEvent(0.0, TextHypothesis(
                side, utterance, 1, text, "", lang, 0, 16000, 16000)))  # type: ignore[arg-type]
        builder.add(ReplayEvent(0.0, UtteranceEnd(utterance, 16000, "wort", "word")))
    ends = [r for r in builder.records if r["event"] == "utterance.end"]
    assert [r["language"] for r in ends] == ["de", "de", "la"]
    assert source_languages(builder.records) == ["de", "la"]
    assert source_language_confidence(builder.records) == {"de": None, "la": None}  # given


def test_the_trace_records_how_sure_a_detected_language_is() -> None:
    builder = TraceBuilder(16000)
    for utterance, confidence in ((0, 0.55), (1, 0.91)):
        builder.add(ReplayEvent(0.0, TextHypothesis(
            "source", utterance, 1, "wort", "", "de", 0, 16000, 16000,
            language_confidence=confidence)))
        builder.add(ReplayEvent(0.0, UtteranceEnd(utterance, 16000, "wort", "word")))
    ends = [r for r in builder.records if r["event"] == "utterance.end"]
    assert [r["language_confidence"] for r in ends] == [0.55, 0.91]
    assert source_language_confidence(builder.records) == {"de": 0.91}  # the latest
