"""What a new user meets after the Quick start (issue 47), in process: defaults in ``--help``,
``translate``'s default pace and its summary, one line per utterance."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from speechpipe.cli import build_parser
from speechpipe.file_translation import utterance_lines
from speechpipe.server.serve import bind_error


def test_serve_accepts_a_room_mt_folder(tmp_path: Path) -> None:
    from speechpipe.server.serve import check_room_mt

    check_room_mt("")  # the default: rooms use --mt auto's routes
    check_room_mt(f"ct2:{tmp_path}")  # a folder (loaded, and checked, when a room needs it)


def test_a_host_that_does_not_resolve_says_so() -> None:
    """The resolver's own error (asking it would send a DNS query: built here instead)."""
    error = bind_error("999.1.1.1", 8765, socket.gaierror(-2, "Name or service not known"))
    assert str(error).startswith("--host 999.1.1.1: not an address or a name")
    assert "0.0.0.0" in str(error)


def test_help_shows_the_defaults() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    help_text = " ".join(commands["translate"].format_help().split())
    assert "(default: fast)" in help_text  # --pace
    assert "(default: auto)" in help_text  # --source-lang
    assert "(default: 22050)" in help_text  # --output-rate
    assert "--mode {balanced,fast,quality} CPU against quality" in help_text
    serve_help = " ".join(commands["serve"].format_help().split())
    assert "(default True)" not in serve_help  # --no-degrade is a switch: no value to show


def test_translate_goes_at_fast_pace_unless_asked_and_eval_stays_realtime() -> None:
    parser = build_parser()
    assert parser.parse_args(["translate", "in.wav", "--out", "o.wav"]).pace == "fast"
    assert parser.parse_args(["translate", "in.wav", "--out", "o.wav",
                              "--pace", "realtime"]).pace == "realtime"
    assert parser.parse_args(["eval", "m.jsonl"]).pace == "realtime"


def test_the_summary_is_one_line_per_utterance_with_its_time() -> None:
    records = [
        {"event": "vad.start", "stream_t": 0.6, "audio_t": 0.48, "utterance": 0},
        {"event": "utterance.end", "stream_t": 4.1, "utterance": 0,
         "source_text": "El gato duerme.", "text": "The cat sleeps."},
        {"event": "vad.start", "stream_t": 75.3, "audio_t": 75.04, "utterance": 1},
        {"event": "utterance.end", "stream_t": 80.0, "utterance": 1,
         "source_text": "Hola.", "text": ""},
        {"event": "vad.start", "stream_t": 90.0, "audio_t": 90.0, "utterance": 2},
        {"event": "utterance.end", "stream_t": 91.0, "utterance": 2,
         "source_text": "", "text": ""},  # nothing said: no line
        {"event": "vad.start", "stream_t": 3725.0, "audio_t": 3723.25, "utterance": 3},
        {"event": "utterance.end", "stream_t": 3726.0, "utterance": 3,
         "source_text": "Adiós.", "text": "Goodbye."},
    ]
    assert utterance_lines(records) == [
        "0:00.5  El gato duerme.  ->  The cat sleeps.",
        "1:15.0  Hola.  ->  (no translation)",
        "1:02:03.2  Adiós.  ->  Goodbye.",
    ]


def test_every_whisper_language_has_a_name() -> None:
    from speechpipe.models.mt.ct2_folder import WHISPER_LANGUAGES
    from speechpipe.stages.language_names import LANGUAGE_NAMES

    assert set(LANGUAGE_NAMES) == set(WHISPER_LANGUAGES)


def test_config_describes_every_option_in_one_line() -> None:
    import re

    from speechpipe.config import Config
    from speechpipe.config_file import render_config

    text = render_config(Config())
    leaves = [line for line in text.splitlines() if re.match(r"^(# )?[a-z_0-9]+ = ", line)]
    assert len(leaves) > 150
    bare = [line for line in leaves if "  # " not in line]
    assert not bare, bare  # every option has its description on its own line
    assert "aggressiveness = 2  # webrtcvad 0 (lenient) .. 3 (strict)" in text
    assert all(len(line.split("  # ", 1)[1]) <= 120 for line in leaves)


def test_config_file_reads_back_what_config_prints(tmp_path: Path) -> None:
    """``speechpipe config ... > FILE`` then ``--config FILE``: the same tree, for serve's
    command line and translate's (which reads the pipeline groups of the same file)."""
    import tomllib

    from speechpipe.cli import _options
    from speechpipe.config import Config
    from speechpipe.config_file import render_config
    from speechpipe.server.serve import serve_config

    parser = build_parser()
    printed = render_config(serve_config(parser.parse_args(
        ["config", "--set", "asr.step_s=0.7", "--capacity", "3", "--set", "vad.hush_ms=0",
         "--set", "catch_up.speeds=1.1,1.2", "--no-degrade"])))
    (tmp_path / "mine.toml").write_text(printed)
    again = serve_config(parser.parse_args(["config", "--config", str(tmp_path / "mine.toml")]))
    assert render_config(again) == printed
    assert again.server.load.admission.capacity == 3 and not again.server.load.degrade_enabled
    assert tomllib.loads(printed) != tomllib.loads(render_config(Config()))
    options = _options(parser.parse_args(["translate", "in.wav", "--out", "o.wav", "--config",
                                          str(tmp_path / "mine.toml"), "--set", "asr.step_s=2"]))
    assert options.asr.step_s == 2.0  # --set wins over the file
    assert options.catch_up.speeds == (1.1, 1.2)  # the file over the defaults


def test_the_unsure_language_hint_names_the_languages_of_this_vote() -> None:
    """An unsure detection's hint offers the vote's own likeliest languages (and those the
    captions came out in), not a fixed example, as the command to run; each language's
    confidence is the one the ``language:`` line prints, the other candidates are named
    only (one confidence per language per file)."""
    from speechpipe.cli import unsure_language_hint

    hint = unsure_language_hint({"es": 0.17}, [("es", 0.21), ("ja", 0.102), ("fr", 0.098)])
    assert hint == ("unsure (the vote's share: es 0.17; also heard: ja, fr): if you know the "
                    "language, pass --source-lang with its code (e.g. --source-lang es); or "
                    "--set asr.detect_among=es,ja,fr to choose among these")
    mixed = unsure_language_hint({"th": 0.4, "de": 0.9}, [("th", 0.5), ("la", 0.2)])
    assert mixed.startswith("unsure (the vote's share: th 0.40; also heard: la, de)"), mixed
    assert mixed.endswith("--set asr.detect_among=th,la,de to choose among these"), mixed
    lone = unsure_language_hint({"es": 0.3}, [])  # no votes kept: the captions' language
    assert lone == ("unsure (the vote's share: es 0.30): if you know the language, pass "
                    "--source-lang with its code (e.g. --source-lang es)")


def test_the_unsure_language_hint_stays_quiet_on_a_vote_its_leader_holds() -> None:
    """A leader holding most of its vote is no reason for a hint, however low one Whisper
    probability was (a right answer locked at asr.language_lock_s with 0.6 printed
    "unsure"); a given language (None) never is."""
    from speechpipe.cli import unsure_language_hint

    assert unsure_language_hint({"de": 0.93}, [("de", 0.93), ("en", 0.02)]) == ""
    assert unsure_language_hint({"es": 0.6}, [("es", 0.45), ("pt", 0.3)]) == ""
    assert unsure_language_hint({"es": None}, []) == ""
    assert unsure_language_hint({"es": 0.49}, [("es", 0.49), ("pt", 0.4)]).startswith("unsure")


def test_a_session_counts_every_detection_for_the_hint() -> None:
    """``PipelineSession.language_candidates``: the detections (requests without a language)
    of the session, each worth its audio's seconds; a request in a given language is not a
    detection and does not count."""
    import asyncio

    import numpy as np

    from speechpipe.session import _CountedDetections
    from speechpipe.stages.language_vote import LanguageVote
    from speechpipe.stages.model_api import WhisperRequest, WhisperResult

    class Client:
        def __init__(self) -> None:
            self.answers = {1.0: (("fr", 0.4), ("es", 0.5)), 3.0: (("fr", 0.6), ("es", 0.2)),
                            2.0: (("de", 1.0),)}

        def __call__(self, request: WhisperRequest):  # type: ignore[no-untyped-def]
            future = asyncio.get_running_loop().create_future()
            probs = self.answers[len(request.audio) / 16_000]
            future.set_result(WhisperResult(language=probs[0][0], language_prob=probs[0][1],
                                            decodes=(), encode_s=0.0, decode_s=0.0,
                                            language_probs=probs))
            return future

        def replace(self, old, new):  # type: ignore[no-untyped-def]
            return None

        def withdraw(self, old) -> bool:  # type: ignore[no-untyped-def]
            return False

    def request(seconds: float, language: str | None = None) -> WhisperRequest:
        return WhisperRequest(np.zeros(int(seconds * 16_000), np.float32), language, ())

    async def run() -> LanguageVote:
        vote = LanguageVote()
        counted = _CountedDetections(Client(), vote)  # type: ignore[arg-type]
        for asked in (request(1.0), request(3.0), request(2.0, language="de")):
            await counted(asked)
        assert counted.replace(request(1.0), request(3.0)) is None
        return vote

    vote = asyncio.run(run())
    ranking = vote.ranking(3)
    assert [language for language, _ in ranking] == ["fr", "es"]  # de was given, not detected
    assert ranking[0][1] == pytest.approx((0.4 * 1 + 0.6 * 3) / 4)
    assert ranking[1][1] == pytest.approx((0.5 * 1 + 0.2 * 3) / 4)


def test_config_help_says_what_each_format_is() -> None:
    """The newcomer run: `config --format` had no help text."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    config = commands.choices["config"]
    action = next(a for a in config._actions if "--format" in a.option_strings)
    assert action.help and "toml" in action.help and "json" in action.help
    assert "%(default)s" in action.help and action.default == "toml"
