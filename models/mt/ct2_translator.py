"""Bring-your-own text MT: a loaded CTranslate2 Marian/OPUS-MT, NLLB or M2M-100 model.

``Ct2TextTranslator`` (sync, thread-safe) loads a converted model folder (its family and
languages come from ``speechpipe.models.mt.ct2_folder``), maps Whisper's language codes to the
family's tokens and runs prefix-constrained ``translate_batch``. Multi-target Marian models
pick the target with a ``>>xx<<`` token at the start of the *source*; NLLB and M2M-100 force
the target-language token as the first target token. The async front many sessions share is
``speechpipe.models.mt.ct2_worker.Ct2TranslationWorker``.
"""

from __future__ import annotations

import collections
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, overload

from speechpipe.errors import InputError, LanguageError, ModelError, SpeechpipeError, WorkerError
from speechpipe.models.mt.ct2_folder import (
    _M2M_TOKEN,
    _MARIAN_TOKEN,
    _NLLB_TOKEN,
    ModelFamily,
    _candidates,
    _detect,
    _read_json,
    _tokenizer_paths,
    _whisper_code,
)
from speechpipe.models.mt.prefill import PrefixReader, probe_tokens
from speechpipe.models.workers.heap import malloc_trim
from speechpipe.stages.model_api import TextMtRequest, TextMtResult

__all__ = ["Ct2Options", "TextMtRequest", "TextMtResult", "Ct2TextTranslator"]


@dataclass(frozen=True, slots=True)
class Ct2Options:
    """Decoding limits. The length cap guards against a model that never emits ``</s>``:
    a target of at most ``length_ratio * source tokens + length_slack`` tokens (at most
    ``max_target_tokens``), prefix included, but always room for ``min_new_tokens`` after it."""

    length_ratio: float = 1.5
    length_slack: int = 10
    max_target_tokens: int = 256
    min_new_tokens: int = 8
    max_input_tokens: int = 1024


# --- the translator --------------------------------------------------------------------

_MIN_COVERAGE = 0.9


def _load_spm(path: Path) -> Any:
    try:
        import sentencepiece
    except ImportError:
        raise ModelError(
            "CTranslate2 text MT needs the sentencepiece package: pip install sentencepiece"
        ) from None
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as exc:
        raise ModelError(f"{path} is not a sentencepiece model ({exc})") from None


def _normal_pieces(sp: Any) -> list[str]:
    return [
        sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))
    ]


def _check_coverage(sp_path: Path, pieces: list[str], vocab: set[str], side: str) -> None:
    if not pieces:
        raise ModelError(f"{sp_path} has no pieces")
    step = max(1, len(pieces) // 5000)
    sample = pieces[::step]
    coverage = sum(1 for p in sample if p in vocab) / len(sample)
    if coverage < _MIN_COVERAGE:
        raise ModelError(
            f"tokenizer {sp_path.name} does not match the model's {side} vocabulary "
            f"(only {coverage:.0%} of its pieces are in it); was it copied from another model?"
        )


@dataclass(frozen=True, slots=True)
class _Prepared:
    source: list[str]
    prefix: list[str]
    prefix_text: str
    lang_tokens: int
    max_length: int
    beam_size: int
    new_cap: int = 0  # the request's max_new_tokens (0: none)
    key: int = 0  # id() of the request, for a look-ahead request's ``follows``
    follows: int = 0  # id() of the request a look-ahead request is compared with (0: none)


def _capped(prepared: _Prepared, follows_generated: int | None) -> _Prepared:
    """A look-ahead request run after the one it is compared with (which generated
    ``follows_generated`` tokens): one token past that one is enough to compare every word
    of its continuation (the extra token shows whether the last word ended there)."""
    if follows_generated is None:
        return prepared
    cap = follows_generated + 1
    if len(prepared.prefix) + cap >= prepared.max_length:
        return prepared
    return replace(prepared, max_length=len(prepared.prefix) + cap, new_cap=cap)


def _lookahead_pairs(batch: Sequence[_Prepared], indexes: Sequence[int]) -> list[list[int]]:
    """``indexes`` of ``batch`` as the reader runs them: a look-ahead request with the
    request it follows (same forced prefix) as one pair, that request first; every other
    request alone (a request is in one pair at most)."""
    by_key = {batch[i].key: i for i in indexes}
    follower: dict[int, int] = {}  # a request -> the look-ahead riding with it
    for i in indexes:
        own = by_key.get(batch[i].follows) if batch[i].follows else None
        if (own is not None and batch[own].prefix == batch[i].prefix
                and not {own, i} & (follower.keys() | follower.values())):
            follower[own] = i
    riding = set(follower.values())
    return [[i, follower[i]] if i in follower else [i] for i in indexes if i not in riding]


class Ct2TextTranslator:
    """A loaded CTranslate2 MT model with its tokenizers. Thread-safe; blocking."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        model_id: str | None = None,
        device: str = "cpu",
        compute_type: str = "default",
        intra_threads: int = 0,
        inter_threads: int = 1,
        options: Ct2Options | None = None,
        prefill: bool = True,
    ) -> None:
        path = Path(model_dir).expanduser().resolve()
        self.info, vocabs = _detect(path)
        self.path = path
        self.family = self.info.family
        self.model_id = model_id or str(path)
        self.options = options or Ct2Options()
        self.batch_calls = 0
        src_path, tgt_path = _tokenizer_paths(path, self.family)  # type: ignore[misc]
        self._src_sp = _load_spm(src_path)
        self._tgt_sp = self._src_sp if tgt_path == src_path else _load_spm(tgt_path)
        self._source_vocab = set(vocabs["source_vocab"])
        self._target_vocab = set(vocabs["target_vocab"])
        _check_coverage(src_path, _normal_pieces(self._src_sp), self._source_vocab, "source")
        target_pieces = _normal_pieces(self._tgt_sp)
        _check_coverage(tgt_path, target_pieces, self._target_vocab, "target")
        self._target_pieces = frozenset(target_pieces)
        config = _read_json(path / "config.json")
        # CTranslate2 adds it itself (add_source_eos), or the model never saw one
        # (speechpipe.json "source_eos": false, e.g. an Argos Translate / OpenNMT model)
        self._append_eos = not config.get("add_source_eos", False) and _read_json(
            path / "speechpipe.json").get("source_eos", True) is not False
        self._eos = str(config.get("eos_token") or "</s>")
        self._load_args = dict(device=device, compute_type=compute_type,
                               intra_threads=intra_threads, inter_threads=inter_threads)
        self._translator_lock = threading.Lock()
        self._translator: Any = self._load_translator()
        # greedy requests decode in the native reader where it decodes the same
        # (models/mt/prefill.py), its forced prefix read in one pass; the Translator's copy of
        # the weights is then let go and loaded again only for beam search. None:
        # translate_batch serves every request
        self._prefix_reader: PrefixReader | None = None
        if prefill:
            self._prefix_reader = PrefixReader.load(
                self._translator, path, intra_threads or min(4, os.cpu_count() or 1), compute_type,
                vocabs["source_vocab"], vocabs["target_vocab"], config,
                probe_tokens(self._src_sp, self._tgt_sp, self._source_vocab,
                             self._target_vocab, self._eos if self._append_eos else None))
            if self._prefix_reader is not None:
                self._translator = None  # one copy of the weights
                malloc_trim()  # resident, not only reusable: ~60 MB for OPUS-MT base

    def _load_translator(self) -> Any:
        try:
            import ctranslate2

            return ctranslate2.Translator(str(self.path), **self._load_args)
        except ImportError:
            raise ModelError("CTranslate2 text MT needs the ctranslate2 package") from None
        except (RuntimeError, ValueError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"CTranslate2 cannot load {self.path}: {first}") from None

    def _stepwise(self) -> Any:
        """The ``ctranslate2.Translator`` (beam search; every request without the reader),
        loaded again on first need when the reader let it go."""
        with self._translator_lock:
            if self._translator is None:
                self._translator = self._load_translator()
            return self._translator

    @property
    def prefix_reads(self) -> int | None:
        """Greedy requests the native reader served so far (each prefix read in one pass);
        None when the reader is off here (``prefill=False``, or it was set aside)."""
        return None if self._prefix_reader is None else self._prefix_reader.calls

    # -- languages

    def _token(self, lang: str, vocab: set[str], form: str, pattern: re.Pattern[str]) -> str | None:
        for code in _candidates(lang):
            token = form.format(code)
            if token in vocab and pattern.match(token):
                return token
        return None

    def _pair_tokens(self, lang: str, vocab: set[str]) -> str | None:
        if self.family is ModelFamily.NLLB:
            return self._token(lang, vocab, "{}", _NLLB_TOKEN)
        if self.family is ModelFamily.M2M100:
            return self._token(lang, vocab, "__{}__", _M2M_TOKEN)
        return self._token(lang, vocab, ">>{}<<", _MARIAN_TOKEN)

    def language_tokens(self, source_lang: str, target_lang: str) -> tuple[str | None, str | None]:
        """Tokens that select the pair: (source token, target token), ``None`` where the
        family needs none. Raises ``LanguageError`` for an unsupported pair.

        NLLB/M2M-100 need the source language; a Marian model with a single source language
        (or a group such as ``mul``) accepts ``auto``.
        """
        name = self.path.name
        known_source = bool(source_lang) and source_lang != "auto"
        if self.family is not ModelFamily.MARIAN:
            if not known_source:
                raise LanguageError(
                    f"MT model {name} ({self.family}) needs the source language, got "
                    f"{source_lang or 'none'}"
                )
            src_token = self._pair_tokens(source_lang, self._source_vocab)
            if src_token is None:
                raise LanguageError(
                    f"MT model {name} ({self.family}) cannot translate from {source_lang!r}"
                )
            tgt_token = self._pair_tokens(target_lang, self._target_vocab)
            if tgt_token is None:
                raise LanguageError(
                    f"MT model {name} ({self.family}) cannot translate into {target_lang!r}"
                )
            return src_token, tgt_token
        sources = self.info.source_langs
        if known_source and _whisper_code(source_lang) is None:
            raise LanguageError(f"unknown source language {source_lang!r}")
        if sources is not None:
            listed = ", ".join(sorted(sources))
            if known_source and _whisper_code(source_lang) not in sources:
                raise LanguageError(
                    f"MT model {name} translates from {listed}, not {source_lang!r}"
                )
            if not known_source and len(sources) > 1:
                raise LanguageError(
                    f"MT model {name} needs the source language (one of {listed}), got "
                    f"{source_lang or 'none'}"
                )
        targets = ", ".join(sorted(self.info.target_langs or ()))
        if self.info.multi_target:
            token = self._pair_tokens(target_lang, self._source_vocab)
            if token is None:
                raise LanguageError(
                    f"MT model {name} cannot translate into {target_lang!r} (targets: {targets})"
                )
            return None, token
        if _whisper_code(target_lang) not in (self.info.target_langs or ()):
            raise LanguageError(f"MT model {name} translates into {targets}, not {target_lang!r}")
        return None, None

    def check_languages(self, source_lang: str, target_lang: str) -> None:
        """Raise ``LanguageError`` unless the model can translate this pair.

        With ``source_lang="auto"`` only the target is checked here; the language Whisper
        detects is checked when its text is translated.
        """
        if source_lang and source_lang != "auto":
            self.language_tokens(source_lang, target_lang)
        elif self.family is ModelFamily.MARIAN:
            sources = sorted(self.info.source_langs or ())
            self.language_tokens(sources[0] if len(sources) > 1 else "", target_lang)
        elif self._pair_tokens(target_lang, self._target_vocab) is None:
            raise LanguageError(
                f"MT model {self.path.name} ({self.family}) cannot translate into "
                f"{target_lang!r}"
            )

    # -- translation

    def _prepare(self, request: TextMtRequest) -> _Prepared:
        if request.beam_size < 1:
            raise InputError("beam_size must be >= 1")
        src_token, tgt_token = self.language_tokens(request.source_lang, request.target_lang)
        source = list(self._src_sp.encode(request.source_text, out_type=str))
        limit = self.options.max_input_tokens - 2
        source = source[:limit]
        if self.family is ModelFamily.MARIAN:
            source = ([tgt_token] if tgt_token else []) + source
        elif src_token:
            source = [src_token, *source]
        if self._append_eos:
            source.append(self._eos)
        prefix_pieces = list(self._tgt_sp.encode(request.target_prefix.strip(), out_type=str))
        lang_prefix = [tgt_token] if tgt_token and self.family is not ModelFamily.MARIAN else []
        opts = self.options
        budget = min(
            opts.max_target_tokens, int(opts.length_ratio * len(source)) + opts.length_slack
        )
        prefix = lang_prefix + prefix_pieces
        max_length = max(len(lang_prefix) + budget, len(prefix) + opts.min_new_tokens)
        if request.max_new_tokens > 0:
            max_length = min(max_length, len(prefix) + request.max_new_tokens)
        return _Prepared(
            source=source,
            prefix=prefix,
            prefix_text=self._decode(prefix_pieces),
            lang_tokens=len(lang_prefix),
            # The cap counts the forced prefix, so forcing tokens greedy decoding would have
            # produced anyway yields the same output as not forcing them.
            max_length=max_length,
            beam_size=request.beam_size,
            new_cap=request.max_new_tokens if max_length == len(prefix) + request.max_new_tokens
            else 0,
            key=id(request),
            follows=id(request.lookahead_of) if request.lookahead_of is not None else 0,
        )

    def forced_tokens(self, request: TextMtRequest) -> int:
        """How many target tokens ``request`` forces (its prefix, language token included)."""
        return len(self._prepare(request).prefix)

    def _decode(self, tokens: Sequence[str]) -> str:
        pieces = [t for t in tokens if t in self._target_pieces]
        return str(self._tgt_sp.decode_pieces(pieces)) if pieces else ""

    def _result(self, prepared: _Prepared, tokens: Sequence[str]) -> TextMtResult:
        generated = list(tokens[len(prepared.prefix) :])
        full = self._decode(list(tokens[prepared.lang_tokens :]))
        prefix_text = prepared.prefix_text
        if prefix_text and full.startswith(prefix_text):
            rest = full[len(prefix_text) :]
            joins = bool(rest) and not rest[0].isspace()
        else:
            rest, joins = self._decode(generated), False
        continuation = rest.strip()
        if prepared.new_cap and len(generated) >= prepared.new_cap:
            # stopped by the new-token cap, not by the model: its last word may be cut
            # ("Hal" of "Hallo"), and is left for the next update to say whole
            continuation = continuation.rsplit(" ", 1)[0] if " " in continuation else ""
            joins = joins and bool(continuation)
        return TextMtResult(
            text=full,
            continuation=continuation,
            joins_prefix=joins and bool(prefix_text),
            source_tokens=len(prepared.source),
            prefix_tokens=len(prepared.prefix),
            generated_tokens=len(generated),
        )

    def _run(self, batch: list[_Prepared]) -> list[tuple[_Prepared, list[str]]]:
        # Greedy hypotheses under a longer length cap start with the shorter-cap ones, so
        # greedy requests share a call and are trimmed to their own cap; beam search picks
        # differently under another cap, so its requests are grouped by cap as well.
        # Requests capped to a few new tokens (open segments) go apart from greedy ones that
        # run to the length cap: sharing a call would decode them to its longest cap.
        groups: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
        for i, p in enumerate(batch):
            if p.beam_size > 1:
                key = p.max_length
            else:
                key = -1 if p.new_cap else 0
            groups[(p.beam_size, key)].append(i)
        hyps: dict[int, list[str]] = {}
        ran = list(batch)
        reader = self._prefix_reader
        if reader is not None:
            # greedy requests in the reader, each prefix read in one pass; a look-ahead
            # request rides in one batch with the request it is compared with and stops a
            # token past it
            greedy = [i for k in [k for k in groups if k[0] == 1] for i in groups.pop(k)]
            for rows in _lookahead_pairs(batch, greedy):
                if len(rows) == 1:
                    p = batch[rows[0]]
                    hyps[rows[0]] = reader.continue_prefix(p.source, p.prefix,
                                                           p.max_length - len(p.prefix))
                    continue
                own, ahead = (batch[i] for i in rows)
                own_tokens, ahead_tokens = reader.continue_rows(
                    [own.source, ahead.source], own.prefix,
                    [own.max_length - len(own.prefix), ahead.max_length - len(ahead.prefix)],
                    [-1, 0])
                hyps[rows[0]] = own_tokens
                ran[rows[1]] = _capped(ahead, len(own_tokens) - len(own.prefix))
                hyps[rows[1]] = ahead_tokens
        for (beam, _), indexes in groups.items():
            group = [batch[i] for i in indexes]
            self.batch_calls += 1
            results = self._stepwise().translate_batch(
                [p.source for p in group],
                target_prefix=[p.prefix or None for p in group],
                beam_size=beam,
                max_decoding_length=max(p.max_length for p in group),
                max_input_length=self.options.max_input_tokens,
                disable_unk=True,
            )
            for i, p, r in zip(indexes, group, results, strict=True):
                hyps[i] = list(r.hypotheses[0])[: p.max_length]
        return [(ran[i], hyps[i]) for i in range(len(batch))]

    @overload
    def translate_batch(
        self, requests: Sequence[TextMtRequest], *, return_exceptions: Literal[False] = False
    ) -> list[TextMtResult]: ...

    @overload
    def translate_batch(
        self, requests: Sequence[TextMtRequest], *, return_exceptions: Literal[True]
    ) -> list[TextMtResult | SpeechpipeError]: ...

    def translate_batch(
        self, requests: Sequence[TextMtRequest], *, return_exceptions: bool = False
    ) -> list[TextMtResult] | list[TextMtResult | SpeechpipeError]:
        """Translate requests together (one ``translate_batch`` per beam size; per beam size
        and length cap for beam search).

        With ``return_exceptions``, a bad request (``LanguageError``...) or a request the engine
        fails on yields its exception in its slot and the others still get results, the way
        ``asyncio.gather(return_exceptions=True)`` does; otherwise the first error is raised.
        """
        outcomes: list[TextMtResult | SpeechpipeError | None] = [None] * len(requests)
        prepared: list[tuple[int, _Prepared]] = []
        for i, request in enumerate(requests):
            try:
                prepared.append((i, self._prepare(request)))
            except SpeechpipeError as exc:
                if not return_exceptions:
                    raise
                outcomes[i] = exc
        if prepared:
            try:
                ran = self._run([p for _, p in prepared])
            except (RuntimeError, ValueError) as exc:
                if not return_exceptions:
                    raise WorkerError(f"text MT failed: {exc}") from exc
                ran = None
            if ran is None:
                # Isolate the failure: retry one by one so only the bad request fails.
                for i, p in prepared:
                    try:
                        outcomes[i] = self._result(*self._run([p])[0])
                    except (RuntimeError, ValueError) as exc:
                        outcomes[i] = WorkerError(f"text MT failed: {exc}")
            else:
                for (i, _), (p, toks) in zip(prepared, ran, strict=True):
                    outcomes[i] = self._result(p, toks)
        return outcomes  # type: ignore[return-value]

    def translate(self, request: TextMtRequest) -> TextMtResult:
        """Translate one request (blocking)."""
        return self.translate_batch([request])[0]
