"""The ``speechpipe`` command line: translate, eval, serve, bench, models.

Any ``SpeechpipeError`` becomes one line on stderr and a non-zero exit (2 for bad input,
1 otherwise); nothing spoken is printed to logs, only to the user's own terminal/files.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from speechpipe import __version__
from speechpipe.errors import InputError, SpeechpipeError
from speechpipe.output_paths import check_outputs_spare_the_input

if TYPE_CHECKING:
    from speechpipe.config import PipelineOptions
    from speechpipe.session import Pipeline
    from speechpipe.stages.cues import Side
    from speechpipe.stages.request import SessionRequest

__all__ = ["main", "build_parser"]

log = logging.getLogger("speechpipe")

class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with a bad argument reported in one line (exit 2): the usage block
    argparse prints first (``serve``'s is 30 lines) buries the message; ``--help`` has it.
    ``--help`` shows every default (``HelpFormatter``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help when it has a value worth showing and the
    help does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (text and "default" not in text and default not in (None, False, True, [], "")
                and default is not argparse.SUPPRESS and action.option_strings
                and action.nargs != 0):
            text += " (default: %(default)s)"
        return text


def _add_session_arguments(parser: argparse.ArgumentParser, pace: str) -> None:
    parser.add_argument("--pace", choices=("realtime", "fast"), default=pace,
                        help="fast: as fast as the machine goes, each output stamped with "
                             "the audio it was based on (computation-unaware latency); "
                             "realtime: paced like a live speaker, the latency a listener "
                             "meets (computation-aware)")
    parser.add_argument("--source-lang", default="auto",
                        help="spoken language (Whisper code, e.g. es) or auto")
    parser.add_argument("--target-lang", default="en", help="language to speak (default en)")
    parser.add_argument("--voice", default=None, help="Piper voice name (default: by language)")
    parser.add_argument("--mt", default="auto",
                        help="auto (default: an installed pair, Whisper to English, or a pivot "
                             "through English), whisper (to English) or ct2:NAME_OR_PATH")
    parser.add_argument("--mode", choices=("balanced", "fast", "quality"), default="balanced",
                        help="CPU against quality: fast decodes at most once a second and "
                             "ends utterances greedily (least CPU), quality searches partials "
                             "with a beam of 2 or more (most CPU), balanced uses the asr "
                             "group's options as set")
    parser.add_argument("--output-rate", type=int, default=22_050,
                        help="sample rate of the translated speech (Hz)")
    from speechpipe.config import MODEL_ALIASES, add_aliases, groups_of

    add_aliases(parser, MODEL_ALIASES)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="GROUP.FIELD=VALUE",
                        help="override an option (repeatable), e.g. asr.step_s=1.0; groups: "
                             f"{groups_of('pipeline')}; `speechpipe config` lists every option")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="read options from this TOML file, in the shape `speechpipe "
                             "config` prints (flags and --set override it; server groups are "
                             "ignored here)")


def build_parser() -> argparse.ArgumentParser:
    """The ``speechpipe`` argument parser with every subcommand."""
    parser = OneLineParser(
        prog="speechpipe", description="Streaming speech-to-speech translation."
    )
    parser.add_argument("--version", action="version", version=f"speechpipe {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (no content)")
    commands = parser.add_subparsers(dest="command", required=True)

    translate = commands.add_parser("translate", help="translate an audio file to speech")
    translate.add_argument("input", help="audio file (anything soundfile reads)")
    translate.add_argument("--out", required=True, help="output WAV of the translated speech")
    translate.add_argument("--trace", default=None, help="write the JSON-lines trace here")
    translate.add_argument("--subtitles", default=None, metavar="PATH",
                           help="write the translation as subtitles on the input's timeline "
                                "(.vtt WebVTT or .srt SubRip, by the suffix)")
    translate.add_argument("--source-subtitles", default=None, metavar="PATH",
                           help="write the source captions as subtitles (.vtt or .srt)")
    _add_session_arguments(translate, pace="fast")

    evaluate = commands.add_parser("eval", help="evaluate on a manifest of clips")
    evaluate.add_argument("manifest",
                          help="JSON-lines manifest (file, lang, transcript, translation_en)")
    evaluate.add_argument("--report", default=None, help="write per-clip and aggregate JSON")
    evaluate.add_argument("--limit", type=int, default=None,
                          help="first N matching clips (N >= 1)")
    evaluate.add_argument("--category", action="append", default=None,
                          help="only clips of this category (repeatable; default: clips "
                               "whose language differs from the target)")
    evaluate.add_argument("--all", action="store_true",
                          help="every clip whose language differs from the target")
    evaluate.add_argument("--lang", action="append", default=None,
                          help="only clips spoken in this language (repeatable)")
    evaluate.add_argument("--split", choices=("tune", "report"), default=None,
                          help="only the tuning or the report half of ../shared/samples, "
                               "split by recording source (speechpipe/evaluation/split.py)")
    evaluate.add_argument("--detect-language", action="store_true",
                          help="let Whisper detect each clip's language instead of the "
                               "manifest's 'lang'")
    evaluate.add_argument("--compare", action="append", default=[],
                          metavar="GROUP.FIELD=VALUE[,...]",
                          help="also run each clip with these overrides, interleaved in the "
                               "same run, and compare (repeatable: one variant each)")
    from speechpipe.evaluation.offline import add_offline_arguments

    add_offline_arguments(evaluate)
    _add_session_arguments(evaluate, pace="realtime")
    from speechpipe.bench.record import add_record_flags

    add_record_flags(evaluate)  # --record: one row in benchmarks/results.jsonl

    config = commands.add_parser(
        "config", help="print the effective configuration tree (serve's arguments apply)"
    )
    config.add_argument("--format", choices=("toml", "json"), default="toml",
                        help="toml (with a one-line description per option; --config reads it "
                             "back) or json (default: %(default)s)")
    _register_optional(commands)
    from speechpipe.server.serve import add_serve_arguments

    add_serve_arguments(config)  # the tree `serve` would run with these arguments
    config.set_defaults(handler=cmd_config)
    return parser


def _register_optional(commands: argparse._SubParsersAction) -> None:
    """Subcommands owned by other modules; each registers itself if present."""
    try:
        from speechpipe.server.serve import add_serve_arguments
    except ImportError:
        pass
    else:
        serve = commands.add_parser("serve", help="run the live server")
        add_serve_arguments(serve)
    try:
        from speechpipe import models_cli
    except ImportError:
        pass
    else:
        models_cli.register(commands)
    try:
        from speechpipe.bench import cli as bench
    except ImportError:
        pass
    else:
        bench.register(commands)
    try:
        from speechpipe.server import security
    except ImportError:
        pass
    else:
        security.register(commands)
    from speechpipe import client_cli  # stream, listen: a client of a running server

    client_cli.register(commands)
    from speechpipe.cluster import cli as cluster_cli  # Ray is imported only when run

    cluster_cli.register(commands)


def _request(args: argparse.Namespace) -> SessionRequest:
    from speechpipe.stages.request import SessionRequest

    return SessionRequest(
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        voice=args.voice,
        output_sample_rate=args.output_rate,
        mode=args.mode,
        mt=args.mt,
        priority="replay",
        pace=args.pace,
    )


def _options(args: argparse.Namespace) -> PipelineOptions:
    from speechpipe.config import MODEL_ALIASES, Config, apply_aliases, with_overrides

    base = Config()
    if getattr(args, "config", None):
        from speechpipe.config_file import load_config_file

        base = load_config_file(args.config, base, server=False)  # its pipeline groups
    options = apply_aliases(base, args, MODEL_ALIASES).pipeline
    return with_overrides(options, args.overrides)


def _check_request(args: argparse.Namespace) -> None:
    """Languages, MT backend and voice, checked without loading a model."""
    from speechpipe.session import check_request
    from speechpipe.voices.registry import resolve_voice

    _, target = check_request(_request(args))
    resolve_voice(args.voice, target, _options(args).voice_dirs)


def _load_pipeline(args: argparse.Namespace) -> Pipeline:
    """A loaded, checked and warmed pipeline; closed again (threads joined) if any step
    fails or is interrupted, so no worker thread outlives it."""
    from speechpipe.session import Pipeline, apply_process_limits

    options = _options(args)
    apply_process_limits(options)
    pipeline = Pipeline.load(options)
    from speechpipe.session import describe_engines

    try:
        resolved = pipeline.resolve(_request(args))  # fail fast on a bad language / voice
        pipeline.warm_up()  # as a server does before it says ready: no cold first decode
    except BaseException:
        pipeline.close()
        raise
    # at start: what translates and what speaks, labelled honestly ("rule-based MT",
    # "robotic voice"), so a listener knows what they will hear
    engines = describe_engines(resolved)
    print(f"translation: {engines['mt']}")
    if "voice" in engines:
        print(f"voice:       {engines['voice']}")
    sys.stdout.flush()
    return pipeline


def _subtitle_paths(args: argparse.Namespace) -> list[tuple[Side, str]]:
    """``--subtitles`` / ``--source-subtitles``, each checked (suffix, folder) before any audio
    is processed."""
    from speechpipe.transport.subtitle_files import check_subtitle_path

    paths: list[tuple[Side, str]] = []
    wanted: list[tuple[Side, str | None]] = [("target", args.subtitles),
                                             ("source", args.source_subtitles)]
    for side, path in wanted:
        if path:
            check_subtitle_path(path)
            paths.append((side, path))
    return paths


def cmd_translate(args: argparse.Namespace) -> int:
    """``speechpipe translate``: one file in, translated speech (and trace) out."""
    from speechpipe.evaluation.trace import source_language_confidence
    from speechpipe.file_translation import translate_file, utterance_lines
    from speechpipe.session import check_output_rate
    from speechpipe.transport.file_output import SpeechFileWriter, check_output_path
    from speechpipe.transport.file_replay import probe_audio

    # Every bad input and output fails here, before the models load.
    source = probe_audio(args.input)
    check_output_rate(args.output_rate)
    _check_request(args)
    if args.trace:
        check_output_path(args.trace)
    subtitles = _subtitle_paths(args)
    check_outputs_spare_the_input(args.input, [("--out", args.out), ("--trace", args.trace),
                                                *(("--subtitles" if side == "target"
                                                   else "--source-subtitles", path)
                                                  for side, path in subtitles)],
                                  config=args.config)
    out = Path(args.out)
    writer = SpeechFileWriter(out, args.output_rate)  # opens (a temporary file) already
    try:
        with _load_pipeline(args) as pipeline:  # leaving joins the workers, releases models
            run = translate_file(source, writer, _request(args), pipeline=pipeline,
                                 trace_path=args.trace)
    finally:
        writer.discard()  # a no-op once committed
    from speechpipe.transport.subtitle_files import write_subtitles

    for side, path in subtitles:
        write_subtitles(path, run.cues(side))
    scores = run.scores

    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f} s"

    languages = source_language_confidence(run.records)
    if not languages:
        print("language:    none (no speech found)")
    elif args.source_lang.strip().lower() != "auto":
        print(f"language:    {', '.join(languages)} (given)")
    else:  # how sure the detection is: Whisper's votes (stages/language_vote.py)
        print("language:    " + ", ".join(
            f"{language} (detected, confidence {confidence or 0:.2f})"
            for language, confidence in languages.items()))
        hint = unsure_language_hint(languages, run.language_candidates)
        if hint:
            print(f"             {hint}")
    for line in utterance_lines(run.records):
        print(line)
    pace = ("" if args.pace == "realtime"
            else "   (fast pace: as if decoding took no time; --pace realtime measures it)")
    print(f"StartOffset: {fmt(scores.get('start_offset'))}   "
          f"EndOffset: {fmt(scores.get('end_offset'))}{pace}")
    print(f"audio:       {run.input_seconds:.1f} s in {run.wall_seconds:.1f} s "
          f"({run.cpu_seconds / max(run.input_seconds, 1e-9):.2f} CPU-s per audio s)")
    written = [str(out), *([args.trace] if args.trace else []), *(p for _, p in subtitles)]
    print(f"wrote {', '.join(written[:-1])} and {written[-1]}" if len(written) > 1
          else f"wrote {out}")
    return 0


UNSURE_BELOW = 0.5  # a detected language's vote share under which translate offers a hint


def unsure_language_hint(languages: dict[str, float | None],
                         candidates: Sequence[tuple[str, float]],
                         below: float = UNSURE_BELOW) -> str:
    """What ``translate`` says under an unsure detection, else "": when a language the
    captions came out in holds under ``below`` of its vote (the leader of a vote where the
    other languages together weigh more: a low single Whisper probability on a vote that
    settled is no reason), the two ways out, named for this input: ``--source-lang`` with
    the likeliest, and ``asr.detect_among`` limited to the languages the vote weighed most
    (``candidates``) and the captions' own. Each language's confidence is the one the
    ``language:`` line prints (``languages``); the candidates are named, not figured, so a
    file has one confidence per language wherever it is printed."""
    unsure = [language for language, confidence in languages.items()
              if confidence is not None and confidence < below]
    if not unsure:
        return ""
    codes = list(unsure) + [language for language, _ in candidates if language not in unsure]
    codes += [language for language in languages if language not in codes]
    held = ", ".join(f"{language} {languages[language] or 0:.2f}" for language in unsure)
    others = [language for language in codes if language not in unsure]
    heard = f"; also heard: {', '.join(others)}" if others else ""
    hint = (f"unsure (the vote's share: {held}{heard}): if you know the language, pass "
            f"--source-lang with its code (e.g. --source-lang {codes[0]})")
    if len(codes) >= 2:
        hint += f"; or --set asr.detect_among={','.join(codes)} to choose among these"
    return hint


def cmd_config(args: argparse.Namespace) -> int:
    """``speechpipe config``: the effective tree (defaults, flags, ``--set``) as TOML/JSON."""
    from speechpipe.config_file import render_config
    from speechpipe.server.serve import serve_config

    print(render_config(serve_config(args), args.format), end="")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """``speechpipe eval``: score the clips of a manifest (``--record``: and append the
    figures to the results file, ``speechpipe.bench.record``)."""
    from speechpipe.bench.record import recorded
    from speechpipe.evaluation.command import run_eval

    return recorded(lambda args: run_eval(args, _options(args), _request(args)))(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a --record row's command
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    handlers = {"translate": cmd_translate, "eval": cmd_eval}
    handler = handlers.get(args.command) or getattr(args, "handler", None)
    if handler is None:
        parser.error(f"unknown command {args.command}")
    terminated = False

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        """SIGTERM (``timeout``, a container stop) ends the run as Ctrl-C does: cleanly, with
        partly written outputs removed (the default disposition kills the process and leaves
        them). It calls what SIGINT would call (inside ``asyncio.run``: cancel the main task)."""
        nonlocal terminated
        terminated = True
        on_sigint = signal.getsignal(signal.SIGINT)
        if callable(on_sigint) and on_sigint is not signal.default_int_handler:
            on_sigint(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = (signal.signal(signal.SIGTERM, on_sigterm)  # serve sets its own while it runs
                if main_thread else None)
    try:
        return int(handler(args) or 0)
    except SpeechpipeError as exc:
        print(f"speechpipe: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, InputError) else 1
    except KeyboardInterrupt:
        if terminated:
            print("speechpipe: terminated", file=sys.stderr)
            return 128 + signal.SIGTERM
        print("speechpipe: interrupted", file=sys.stderr)
        return 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
