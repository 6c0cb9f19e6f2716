"""Apertium: rule-based text MT from Debian's ``apertium-*`` pairs, one persistent pipeline per
pair per process, shared by every session that translates that pair.

Why not ``apertium -u PAIR`` per sentence: a fresh process chain costs 230-330 ms (99 % of it
starting a dozen programs); the persistent chain answers in 2-4 ms. Why not ``apertium -z``:
its text deformatter and gawk filters read ahead on a pipe and never answer. So the pair's
own stage pipeline is read from its mode file (``/usr/share/apertium/modes/eng-spa.mode``) and
started once, every stage in null-flush mode (``-z``): the text goes in escaped
(``[]{}^$@\\/<>``) with the deformatter's ``.[][\\n]`` terminator and a NUL; each stage
flushes at the NUL, so the translation comes back up to the next NUL (DESIGN.md: it matched
``apertium -u`` on 90 of 90 sentences).

Three parts:

- ``ApertiumPair`` / ``installed_pairs``: what is installed (mode files), as ISO 639-1 pairs;
  ``install_hint`` names the Debian package for a pair that is not.
- ``ApertiumProcess``: one running chain (synchronous, one caller at a time): a read past
  ``deadline_s`` or a dead stage raises ``ApertiumDied`` after killing the whole chain.
- ``ApertiumTranslator``: the async front sessions share (``translate(TextMtRequest)``, the
  text-MT seam of ``stages.text_mt``). Requests queue on one thread per pair; a dead or hung
  chain is started again and the text retried once, so a session loses one update at most.

Apertium cannot continue a forced target prefix: ``continuation_after`` aligns the words the
policy already committed with the new translation and returns what follows them, and the
policy commits by hold-N (``ApertiumOptions.hold_words``), so only the held tail can change.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import re
import select
import shlex
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from speechpipe.errors import LanguageError, WorkerError
from speechpipe.models.mt.apertium_options import ApertiumOptions
from speechpipe.models.workers import faults
from speechpipe.models.workers.guard import LatencyBudget, WorkerGuard
from speechpipe.stages.agreement import normalize_word
from speechpipe.stages.model_api import TextMtRequest, TextMtResult
from speechpipe.stages.text_mt_options import TextMtOptions

__all__ = [
    "ApertiumDied", "ApertiumHooks", "ApertiumOptions", "ApertiumPair", "ApertiumProcess",
    "ApertiumTranslator", "HOOKS",
    "BACKEND", "DEBIAN_PAIRS", "LICENCE", "continuation_after", "install_hint",
    "installed_pairs", "modes_dir",
]

log = logging.getLogger("speechpipe.apertium")

BACKEND = "apertium"
LICENCE = ("GPL-2.0-or-later (engine), GPL-2.0 (pair data), GPL-3.0 (apertium-lex-tools); "
           "runs as separate processes")
LABEL = "rule-based MT (Apertium)"

# Apertium names languages by ISO 639-3 (eng-spa) or 639-1 (fr-es): both to Whisper's codes
_CODES = {
    "eng": "en", "spa": "es", "fra": "fr", "cat": "ca", "glg": "gl", "ita": "it", "por": "pt",
    "ron": "ro", "oci": "oc", "eus": "eu", "deu": "de", "nld": "nl", "afr": "af", "dan": "da",
    "nob": "no", "nno": "nn", "swe": "sv", "isl": "is", "mkd": "mk", "bul": "bg", "rus": "ru",
    "ukr": "uk", "bel": "be", "pol": "pl", "slv": "sl", "hbs": "hr", "ind": "id", "zlm": "ms",
    "hin": "hi", "urd": "ur", "bre": "br",
}

# Debian packages by the pairs they translate (most translate both ways): the install hint
DEBIAN_PAIRS: dict[str, tuple[tuple[str, str], ...]] = {
    "apertium-eng-spa": (("en", "es"), ("es", "en")),
    "apertium-fr-es": (("fr", "es"), ("es", "fr")),
    "apertium-es-pt": (("es", "pt"), ("pt", "es")),
    "apertium-spa-cat": (("es", "ca"), ("ca", "es")),
    "apertium-es-gl": (("es", "gl"), ("gl", "es")),
    "apertium-spa-ita": (("es", "it"), ("it", "es")),
    "apertium-es-ro": (("es", "ro"), ("ro", "es")),
    "apertium-eng-cat": (("en", "ca"), ("ca", "en")),
    "apertium-en-gl": (("en", "gl"), ("gl", "en")),
    "apertium-fra-cat": (("fr", "ca"), ("ca", "fr")),
    "apertium-por-cat": (("pt", "ca"), ("ca", "pt")),
    "apertium-pt-gl": (("pt", "gl"), ("gl", "pt")),
    "apertium-cat-ita": (("ca", "it"), ("it", "ca")),
    "apertium-oc-es": (("oc", "es"), ("es", "oc")),
    "apertium-oci-fra": (("oc", "fr"), ("fr", "oc")),
    "apertium-eu-es": (("eu", "es"),),
    "apertium-eu-en": (("eu", "en"),),
    "apertium-br-fr": (("br", "fr"),),
    "apertium-dan-nor": (("da", "no"), ("no", "da")),
    "apertium-swe-dan": (("sv", "da"), ("da", "sv")),
    "apertium-nno-nob": (("nn", "no"), ("no", "nn")),
    "apertium-rus-ukr": (("ru", "uk"), ("uk", "ru")),
    "apertium-bel-rus": (("be", "ru"), ("ru", "be")),
    "apertium-afr-nld": (("af", "nl"), ("nl", "af")),
    "apertium-isl-eng": (("is", "en"),),
    "apertium-mkd-eng": (("mk", "en"),),
    "apertium-mkd-bul": (("mk", "bg"), ("bg", "mk")),
    "apertium-ind-zlm": (("id", "ms"), ("ms", "id")),
    "apertium-urd-hin": (("ur", "hi"), ("hi", "ur")),
}

_ESCAPED = re.compile(r"([\[\]{}^$@\\/<>])")
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_TERMINATOR = ".[][\n]"  # what apertium-destxt ends a text with; the stages pass it through
_MAX_CHARS = 4096  # one request's source text at most (a sentence of captions is ~300)
_MAX_REPLY = 1 << 20


@dataclass(frozen=True, slots=True)
class ApertiumPair:
    """One installed direction: ``source`` -> ``target`` (ISO 639-1) by ``mode``."""

    source: str
    target: str
    mode: str  # the mode file's name, e.g. "eng-spa"
    path: Path

    @property
    def name(self) -> str:
        """The route's hop name (``apertium:eng-spa``)."""
        return f"{BACKEND}:{self.mode}"

    @property
    def package(self) -> str:
        """The Debian package that installs it, when known."""
        for package, pairs in DEBIAN_PAIRS.items():
            if (self.source, self.target) in pairs:
                return package
        return "apertium-" + self.mode


def _code(part: str) -> str | None:
    if part in _CODES:
        return _CODES[part]
    return part if len(part) == 2 and part.isalpha() and part.islower() else None


MODES_DIR = "/usr/share/apertium/modes"
MODES_ENV = "SPEECHPIPE_APERTIUM_MODES"


def modes_dir() -> Path:
    """Where the installed pairs' mode files are: ``$SPEECHPIPE_APERTIUM_MODES``, else
    Debian's folder (the ``apertium-*`` packages install there)."""
    return Path(os.environ.get(MODES_ENV) or MODES_DIR)


def installed_pairs(folder: str | os.PathLike[str] | None = None,
                    ) -> dict[tuple[str, str], ApertiumPair]:
    """(source, target) -> the installed pair, read from the mode files (no process starts).
    Regional variants (``es-pt_BR``) and other modes are left out; nothing without the
    ``apertium`` engine itself (``lt-proc``) on PATH."""
    folder = Path(folder) if folder is not None else modes_dir()
    if not folder.is_dir() or shutil.which("lt-proc") is None:
        return {}
    pairs: dict[tuple[str, str], ApertiumPair] = {}
    for path in sorted(folder.glob("*.mode")):
        parts = path.stem.split("-")
        if len(parts) != 2:
            continue
        source, target = (_code(p) for p in parts)
        if source and target and source != target:
            pairs.setdefault((source, target), ApertiumPair(source, target, path.stem, path))
    return pairs


def install_hint(source: str, target: str) -> str | None:
    """The ``apt install`` line for a pair Debian has, else None."""
    for package, pairs in DEBIAN_PAIRS.items():
        if (source, target) in pairs:
            return f"apt install apertium {package}"
    return None


def stage_commands(mode_path: Path) -> list[list[str]]:
    """The mode file's pipeline as argv lists, each stage in null-flush mode (``-z``);
    ``$1`` is ``-n`` (no marks on unknown words, as ``apertium -u``), ``$2`` empty."""
    text = mode_path.read_text(encoding="utf-8").strip()
    stages = []
    for stage in text.split("|"):
        argv = [a for a in shlex.split(stage.replace("$1", "-n").replace("$2", "")) if a]
        if not argv:
            raise WorkerError(f"Apertium mode {mode_path.name} has an empty stage")
        stages.append([argv[0], "-z", *argv[1:]])
    return stages


def escape(text: str) -> str:
    """``text`` as the stages read it: control characters to spaces, reserved ones escaped."""
    return _ESCAPED.sub(r"\\\1", _CONTROL.sub(" ", text))


def unescape(reply: str) -> str:
    """A reply without the terminator and escapes, its spacing normalized."""
    for ending in (_TERMINATOR, "[][\n]"):
        if reply.endswith(ending):
            reply = reply[: -len(ending)]
            break
    return " ".join(_UNESCAPE.sub(r"\1", reply).split())


class ApertiumDied(WorkerError):
    """The chain stopped answering (a stage exited, or no answer within the deadline)."""

    code = "worker_error"


class ApertiumProcess:
    """One running stage chain; one caller at a time (``ApertiumTranslator``'s thread)."""

    def __init__(self, pair: ApertiumPair) -> None:
        self.pair = pair
        self.starts = 0
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for p in self._procs)

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self._procs)

    def start(self) -> None:
        self.close()
        previous: subprocess.Popen[bytes] | None = None
        group = 0
        try:
            for argv in stage_commands(self.pair.path):
                proc = subprocess.Popen(
                    argv, stdin=previous.stdout if previous else subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    process_group=group, close_fds=True)
                if previous is not None and previous.stdout is not None:
                    previous.stdout.close()  # the next stage holds it now
                group = group or proc.pid
                self._procs.append(proc)
                previous = proc
        except OSError as exc:
            self.close()
            raise WorkerError(f"cannot start Apertium {self.pair.mode}: {exc}") from None
        self.starts += 1

    def translate(self, text: str, deadline_s: float) -> str:
        """``text`` translated; ``ApertiumDied`` (the chain killed) when it does not answer."""
        if not self.running:
            self.start()
        first, last = self._procs[0], self._procs[-1]
        assert first.stdin is not None and last.stdout is not None
        payload = (escape(text) + _TERMINATOR).encode("utf-8") + b"\0"
        try:
            first.stdin.write(payload)
            first.stdin.flush()
            reply = self._read_reply(last.stdout.fileno(), time.monotonic() + deadline_s)
        except (OSError, ValueError, ApertiumDied) as exc:
            self.close()
            raise ApertiumDied(f"Apertium {self.pair.mode} stopped answering "
                               f"({type(exc).__name__})") from None
        return unescape(reply.decode("utf-8", "replace"))

    @staticmethod
    def _read_reply(fd: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ApertiumDied("deadline")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ApertiumDied("a stage exited")
            chunks.append(chunk)
            size += len(chunk)
            if chunk.endswith(b"\0"):
                return b"".join(chunks)[:-1]
            if size > _MAX_REPLY:
                raise ApertiumDied("reply too long")

    def close(self) -> None:
        """Kill the whole chain (its process group) and reap it."""
        procs, self._procs = self._procs, []
        if not procs:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(procs[0].pid, 9)
        for proc in procs:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                proc.kill()
                proc.wait(timeout=5)


def continuation_after(prefix: str, translation: str) -> str:
    """What ``translation`` says after the words of ``prefix`` (already committed), for a
    translator that cannot be forced to continue a prefix.

    The continuation starts after the head of the translation that is closest to the prefix
    (word edit distance, case and punctuation aside; of equally close heads, the one nearest
    the prefix's length): a translation that starts with the prefix continues right after
    it, and a word the new translation revised is taken as said already."""
    words = translation.split()
    done = [normalize_word(w) for w in prefix.split()]
    if not done:
        return " ".join(words)
    norm = [normalize_word(w) for w in words]
    if norm[: len(done)] == done:
        return " ".join(words[len(done):])
    # row[j]: edit distance between the prefix (so far) and the translation's first j words
    row = list(range(len(norm) + 1))
    for i, word in enumerate(done, 1):
        previous, row = row, [i] + [0] * len(norm)
        for j, other in enumerate(norm, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (word != other))
    cut = min(range(len(row)), key=lambda j: (row[j], abs(j - len(done))))
    return " ".join(words[cut:])


class ApertiumTranslator:
    """The shared async front of one pair (see the module docs); ``translate`` is the
    text-MT seam's call, ``policy`` the incremental policy this backend runs under."""

    def __init__(self, pair: ApertiumPair, options: ApertiumOptions | None = None) -> None:
        self.pair = pair
        self.options = options or ApertiumOptions()
        self.process = ApertiumProcess(pair)
        self.restarts = 0
        self.calls = 0
        # a pair is not the whole server: one that is down leaves /readyz alone
        self.guard = WorkerGuard(f"mt:{pair.name}", required=False,
                                 budget=LatencyBudget(floor_s=2.0, ceiling_s=20.0))
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"apertium-{pair.mode}")
        self._lock = threading.Lock()
        self._closed = False

    label = LABEL

    @property
    def model_id(self) -> str:
        """The translation memory keys on it."""
        return self.pair.name

    def check_languages(self, source_lang: str, target_lang: str) -> None:
        """Raise ``LanguageError`` unless this pair translates ``source`` -> ``target``."""
        if (source_lang, target_lang) != (self.pair.source, self.pair.target):
            raise LanguageError(f"Apertium {self.pair.mode} translates {self.pair.source} -> "
                                f"{self.pair.target}, not {source_lang} -> {target_lang}")

    def policy(self, base: TextMtOptions) -> TextMtOptions:
        """The incremental policy for this backend: hold-N (no forced prefix to agree on),
        no look-ahead, and the held words not shown (their re-translations churn)."""
        return replace(base, hold_words=max(1, self.options.hold_words), lookahead=False,
                       beam_size=1, show_tentative=False)

    def translate_text(self, text: str) -> str:
        """Blocking: ``text`` translated (on the caller's thread; one call at a time). A
        dead or hung chain is started again and the text retried once."""
        text = text[:_MAX_CHARS]
        with self._lock:
            if self._closed:
                raise WorkerError("the Apertium worker is closed")
            faults.hit("mt")  # a test seam: a no-op unless a test arms it
            started = time.perf_counter()
            if self.process.starts and not self.process.running:  # a stage died meanwhile
                self.restarts += 1
                self.guard.replaced()
                log.warning("Apertium %s restarted: a stage had exited", self.pair.mode)
            try:
                reply = self.process.translate(text, self.options.deadline_s)
            except ApertiumDied as first:
                self.restarts += 1
                self.guard.replaced()
                log.warning("Apertium %s restarted: %s", self.pair.mode, first)
                try:
                    reply = self.process.translate(text, self.options.deadline_s)
                except WorkerError:
                    self.guard.failed()
                    raise
            self.calls += 1
            self.guard.succeeded(time.perf_counter() - started)
            return reply

    async def translate(self, request: TextMtRequest) -> TextMtResult:
        """The seam's call: translate the whole source; the continuation is what follows the
        committed target words (``continuation_after``)."""
        if self._closed:
            raise WorkerError("the Apertium worker is closed")
        self.guard.admit()
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(self._executor, self.translate_text,
                                          request.source_text)
        continuation = continuation_after(request.target_prefix, text)
        whole = " ".join(p for p in (request.target_prefix, continuation) if p)
        return TextMtResult(whole, continuation, source_tokens=len(request.source_text.split()),
                            generated_tokens=len(continuation.split()))

    def warm_up(self) -> None:
        """Start the chain and translate one word, so the first session does not wait for
        the programs to read their data (blocking)."""
        self.translate_text("Hello." if self.pair.source == "en" else "1.")

    def close(self) -> None:
        """Stop: the thread is joined, the chain killed. Idempotent."""
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self.process.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


class ApertiumHooks:
    """What the backend answers for in ``models.mt.backends`` (its row there: ``HOOKS``)."""

    def pairs(self) -> dict[tuple[str, str], str]:
        """The installed directions -> their hops (``apertium:eng-spa``)."""
        return {direction: pair.name for direction, pair in installed_pairs().items()}

    def pair(self, hop: str) -> ApertiumPair:
        """The installed pair ``apertium:MODE`` (``apertium:eng-spa``) names."""
        mode = hop.removeprefix(f"{BACKEND}:")
        for pair in installed_pairs().values():
            if pair.mode == mode:
                return pair
        names = ", ".join(sorted(p.mode for p in installed_pairs().values())) or "none"
        raise LanguageError(f"no Apertium pair {mode[:64]!r} is installed (installed: "
                            f"{names}); Debian's apertium-* packages install them")

    def check(self, hop: str) -> None:
        """``LanguageError`` unless the pair is installed."""
        self.pair(hop)

    def worker(self, hop: str, options: ApertiumOptions | None) -> ApertiumTranslator:
        """The pair's chain, started (the first session waits ~0.1 s once; blocking)."""
        translator = ApertiumTranslator(self.pair(hop), options)
        translator.warm_up()
        return translator

    def warm(self, options: ApertiumOptions) -> list[str]:
        """The hops of ``apertium.warm`` (``en-es``); an unknown or uninstalled pair is
        refused with ``LanguageError``."""
        installed = installed_pairs()
        hops = []
        for name in options.warm:
            source, _, target = name.partition("-")
            pair = installed.get((source, target))
            if pair is None:
                raise LanguageError(f"apertium.warm: no Apertium pair {name[:32]!r} is "
                                    "installed")
            hops.append(pair.name)
        return hops

    def describe(self, hop: str) -> str:
        """``rule-based MT (Apertium eng-spa)``."""
        return f"rule-based MT (Apertium {hop.removeprefix(f'{BACKEND}:')})"

    def install_hint(self, source: str, target: str) -> str | None:
        """The Debian package's ``apt install`` line, when Debian has the pair."""
        line = install_hint(source, target)
        return f"install rule-based MT with `{line}`" if line else None

    def listing(self) -> tuple[list[dict[str, object]], list[str]]:
        """``models list``: the installed pairs (rows for ``--json``, and the lines)."""
        rows: list[dict[str, object]] = [
            {"name": p.name, "source_lang": p.source, "target_lang": p.target,
             "package": p.package, "mode_file": str(p.path), "licence": LICENCE}
            for _, p in sorted(installed_pairs().items())]
        lines = [f"Rule-based MT (Apertium, Debian packages; {LICENCE}):"]
        if not rows:
            lines.append("  none - e.g. `apt install apertium apertium-eng-spa apertium-fr-es "
                         "apertium-es-pt` (en<->es, fr<->es, es<->pt)")
        lines += [f"  {r['name']:<24} {r['source_lang']} -> {r['target_lang']:<4} {r['package']}"
                  for r in rows]
        return rows, lines


HOOKS = ApertiumHooks()
