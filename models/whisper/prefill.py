"""Reading Whisper's forced text prefix in one pass: the native decoder and its plan.

A streaming decode forces the words it has already committed as a text prefix. CTranslate2's
Whisper ``generate`` reads such a prefix one decoder step per token, at the full beam width
after the first step (5 rows per item where 1 would do). ``_ct2_prefill`` (models/native/,
built by setup.py against the CTranslate2 headers in third_party/) reads most of it in the
prompt pass instead, one row per item and all positions at once, and leaves the search as it
was; see the C++ file's header for why the results equal ``generate``'s.

- ``prefill_text_tokens`` decides how much of a request's prefixes the prompt pass reads,
  from the request alone (so a request's result never depends on its batch);
- ``NativePrefill`` gives each worker thread its own native decoder per model folder, and
  per vocabulary restriction (``models.whisper.vocab``): a restricted decoder shares the
  model's weights and holds only its gathered output-layer rows (~19 MB for 36k tokens of
  Whisper base), at most ``restricted_budget_bytes`` of them in all, least recently used
  evicted (gathering them again costs ~20 ms).

When the extension is missing (no C++ compiler at install time) or was built for another
CTranslate2 version, ``native_prefill()`` says why once and returns None; the engine then
decodes with ``generate`` as before. A version that matches is not proof: at warm-up the
engine decodes a request both ways (``prefill_disagreement``) and keeps the native decoder
only when it decodes what ``generate`` does (``WhisperDecoders.verify_native``).

The same decoders can run their single decoder steps through their own int8 product
(``rows_step``: ``RowsDense`` in the C++ file) instead of CTranslate2's oneDNN GEMM, which
on a CPU without AVX-512 repacks every weight matrix at every step. ``rows_step_choice``
decides where (``pipeline.asr_inplace_step``); the warm-up checks that it equals
CTranslate2's layer where both are exact (``rows_step_disagreement``). That check, and the
one against ``generate``, use a decoder without it: on AVX2 oneDNN's int8 product saturates
(below), so the two differ by design.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["PREFILL_BUCKET_TOKENS", "RESTRICTED_BUDGET_BYTES", "NativePrefill", "native_prefill",
           "prefill_text_tokens", "prefill_disagreement", "AGREEMENT_PREFIX", "ROWS_STEP_MAX",
           "rows_step_choice", "rows_step_disagreement"]

# the prompt pass reads a multiple of this many text tokens: requests that read the same
# count can share a call (they need the same start position). 1: read all it can; at 8
# sessions the mean batch is ~1.03 anyway (docs/benchmarks.md), so a coarser bucket would
# force more steps for batching that rarely happens
PREFILL_BUCKET_TOKENS = 1

# the most rows (beams x items x requests) a decoder step multiplies in place: no limit in
# practice. On AVX2 CTranslate2's products saturate and the in-place ones do not, so a step
# over a limit would decode differently, and a request's result would depend on the requests
# batched with it (design.md: batched results equal unbatched ones). Measured on an AVX2 EPYC
# (docs/benchmarks.md): 1.9x cheaper a step at 1 row, 1.4x at 10, 1.17x at 20; grouped
# steps of more rows are rare (mean batch ~1.03 at eight sessions)
ROWS_STEP_MAX = 1 << 16

_native: ModuleType | None = None
_native_checked = False
_native_lock = threading.Lock()


def prefill_text_tokens(prefix_lengths: Sequence[int],
                        bucket: int = PREFILL_BUCKET_TOKENS) -> int:
    """How many text tokens the prompt pass reads of each prefix of one request (its tasks'
    forced prefixes, ``prefix_lengths`` tokens each): the same count for all of them, so
    they share the call; at least one prefix token of each is left to be forced (its first
    free step then penalises an early end-of-text in secondary beams, as ``generate``
    does), and a multiple of ``bucket``. 0 when any prefix is empty."""
    if not prefix_lengths:
        return 0
    readable = min(prefix_lengths) - 1
    if readable <= 0:
        return 0
    return readable - readable % max(1, bucket)


def native_prefill() -> ModuleType | None:
    """The compiled extension, or None (logged once) when it is not usable here."""
    global _native, _native_checked
    with _native_lock:
        if not _native_checked:
            _native_checked = True
            _native = _load_native()
        return _native


def _load_native() -> ModuleType | None:
    import ctranslate2  # loads the library the extension links to, first

    try:
        from speechpipe.models import _ct2_prefill  # type: ignore[attr-defined]
    except ImportError as exc:
        log.info("prefix prefill unavailable (%s): decoding with generate", exc)
        return None
    if _ct2_prefill.CTRANSLATE2_VERSION != ctranslate2.__version__:
        log.warning("prefix prefill built for CTranslate2 %s, %s is installed: decoding "
                    "with generate", _ct2_prefill.CTRANSLATE2_VERSION, ctranslate2.__version__)
        return None
    return _ct2_prefill


RESTRICTED_BUDGET_BYTES = 128 << 20  # the default of ``asr_restricted_cache_mb``

# a prefix Whisper goes on from even over noise ("five."), so the check compares new ids
AGREEMENT_PREFIX = " One, two, three, four,"


def prefill_disagreement(engine: Any, native: NativePrefill) -> str | None:
    """Whether ``native`` (the engine's native decoders) decodes what CTranslate2's
    ``generate`` does here: a forced prefix over 2 s of seeded noise, beam 5. With nothing
    extra read in the prompt pass the search is ``generate``'s own, so its ids and score
    must be equal (score within 1e-4); with the prefix read in the prompt pass, the prefix
    must come back as given. None when both hold, else what differs. (Texts after a prefix
    read at once may differ from ``generate``'s in a near tie, so they are not compared.)
    Both sides are decoders of ``models.whisper.generate``, as the engine calls them."""
    import numpy as np

    from speechpipe.models.whisper.generate import Ct2Decoder, NativeDecoder

    audio = (np.random.default_rng(0).standard_normal(32_000) * 0.01).astype(np.float32)
    encoded = engine._encode_rows([engine.mel(audio)])
    prefix = engine.prompts.text_ids(AGREEMENT_PREFIX)
    prompt = engine.prompts.sot("en", "transcribe") + prefix
    call = {"beam_size": 5, "n_context": 0, "max_length": 2 * (len(prefix) + 12)}
    model, _ = engine.decoder("en", 0)  # the full vocabulary: generate's own model
    reference = Ct2Decoder(model).generate(encoded, [prompt], prefilled=0, **call)[0]
    decoder = NativeDecoder(native.reference_decoder(engine.model_dir))
    alone = decoder.generate(encoded, [prompt], prefilled=0, **call)[0]
    want, got = reference.ids, alone.ids
    if got != want or abs(float(alone.score or 0.0) - float(reference.score or 0.0)) > 1e-4:
        return (f"ids {got} score {alone.score:.5f} where generate gives {want} "
                f"score {reference.score:.5f}")
    read = decoder.generate(encoded, [prompt], prefilled=len(prefix) - 1, **call)[0]
    if read.ids[: len(prefix)] != prefix:
        return f"the prefix read in the prompt pass came back as {read.ids[:len(prefix)]}"
    return None


def rows_step_choice(setting: str, *, repacks_weights: bool, avx2: bool = True) -> int:
    """The most rows a decoder step multiplies in place (0: none) for
    ``pipeline.asr_inplace_step``: "auto" where CTranslate2's int8 GEMM repacks the weights
    at every step (oneDNN without AVX-512: ``speechpipe.machine.CpuInfo.repacks_weights``)
    and the CPU has AVX2 (the kernel's; older CPUs would run its plain C++ loop), "on"
    everywhere (on an Intel CPU, MKL's packed weights leave nothing to multiply in place:
    the decoder then says so and steps as before), "off" nowhere."""
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"asr_inplace_step must be auto, on or off, not {setting!r}")
    if setting == "off" or (setting == "auto" and not (repacks_weights and avx2)):
        return 0
    return ROWS_STEP_MAX


def rows_step_disagreement(module: ModuleType, folder: Path) -> str | None:
    """Whether the in-place product gives CTranslate2's layer output bit for bit where
    CTranslate2's own is exact: None when it does, else what differs.

    On a CPU without VNNI, oneDNN multiplies int8 with ``vpmaddubsw``, whose 16-bit pair
    sums saturate: an input shifted to u8 above ~128 against a large weight loses the
    excess, so its products are not exact there (measured: up to 0.6 on outputs of ~8). The
    in-place product is exact everywhere. They are compared where neither saturates: every
    input value <= 0 (u8 <= 128), where each pair sum stays below 2 x 128 x 127. The
    integer kernel itself is compared with plain C++ on random data."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = -np.abs(rng.standard_normal((3, 512))).astype(np.float32)
    for scope, gelu in (("decoder/layer_0/self_attention/linear_0", False),
                        ("decoder/layer_0/ffn/linear_0", True)):
        worst = float(module.compare_dense(str(folder), scope, x, gelu)[0])
        if worst != 0.0:
            return f"{scope}: differs by {worst:g} from CTranslate2's layer"
    xs = rng.integers(-128, 128, (5, 64), dtype=np.int8)
    ws = rng.integers(-127, 128, (7, 64), dtype=np.int8)
    for shifted in (True, False):
        if int(module.compare_kernels(xs, ws, shifted)) != 0:
            return "the AVX2 kernel differs from plain C++"
    return None


class NativePrefill:
    """Native decoders by (thread, model folder, restriction); each thread builds its own on
    first use (CTranslate2's decoder layers are per thread; the weights are loaded once per
    folder and shared by every restriction)."""

    def __init__(self, module: ModuleType, threads: int,
                 restricted_budget_bytes: int = RESTRICTED_BUDGET_BYTES, rows_step: int = 0):
        self.module = module  # the extension (also its checks: ``rows_step_disagreement``)
        self._threads = threads
        # the most rows a decoder step multiplies in place (``rows_step_choice``); 0: none
        self.rows_step = rows_step
        self._generation = 0  # bumped when rows_step changes: threads rebuild their decoders
        self._local = threading.local()
        self._kept: dict[str, Any] = {}  # one decoder per folder: keeps its weights loaded
        self._lock = threading.Lock()
        self.restricted_budget_bytes = restricted_budget_bytes
        # bytes of each thread's restricted decoders, by (thread ident, folder, restriction);
        # a thread that ended took its decoders with it (thread-local): its entries are
        # dropped (``_forget_ended``), else the budget would count memory long freed
        self._restricted: dict[tuple[int, str, str], int] = {}
        self._owners: dict[int, threading.Thread] = {}
        self.restricted_built = 0  # restricted decoders built (misses), for the metrics
        self._refusals: dict[str, str | None] = {}  # restriction_refused, per folder

    def preload(self, folder: Path) -> None:
        """Load ``folder``'s weights now (blocking) and keep them: the threads' decoders of
        that folder then only build their layers."""
        with self._lock:
            if str(folder) not in self._kept:
                self._kept[str(folder)] = self.module.PrefillDecoder(str(folder), self._threads)

    def reference_decoder(self, folder: Path) -> Any:
        """A decoder of ``folder`` that steps with CTranslate2's own layers (the checks
        against ``generate``), built per call."""
        return self.module.PrefillDecoder(str(folder), self._threads)

    def set_rows_step(self, rows: int) -> None:
        """Decoders built from now on multiply at most ``rows`` rows in place (0: none);
        those built before are dropped, this thread's now and the others' as they ask."""
        with self._lock:
            self.rows_step = rows
            self._generation += 1

    def decoder(self, folder: Path, restriction: tuple[str, Any] | None = None) -> Any:
        """This thread's native decoder of ``folder``; with ``restriction`` (a name and the
        sorted full-vocabulary ids its output layer keeps, any sequence of ints), one that
        scores those ids only (ids in and out stay the full vocabulary's)."""
        generation = self._generation
        if self._local.__dict__.get("generation", 0) != generation:  # rows_step changed
            self._local.__dict__["decoders"] = OrderedDict()
            self._local.__dict__["generation"] = generation
        decoders: OrderedDict[tuple[str, str], Any] = self._local.__dict__.setdefault(
            "decoders", OrderedDict())
        name = restriction[0] if restriction is not None else ""
        key = (str(folder), name)
        found = decoders.get(key)
        if found is not None:
            decoders.move_to_end(key)
            return found
        if restriction is None:
            decoders[key] = self.module.PrefillDecoder(key[0], self._threads,
                                                        rows_step=self.rows_step)
            return decoders[key]
        made = self.module.PrefillDecoder(key[0], self._threads,
                                           [int(i) for i in restriction[1]],
                                           rows_step=self.rows_step)
        thread = threading.get_ident()
        with self._lock:
            self._forget_ended()
            if self._owners.get(thread) is not threading.current_thread():  # ident reused
                self._drop_thread(thread)
                self._owners[thread] = threading.current_thread()
            self.restricted_built += 1
            self._restricted[(thread, *key)] = int(made.output_bytes)
            # least recently used first, this thread's only (the others' are in use)
            for old in [k for k in decoders if k[1]]:
                if sum(self._restricted.values()) <= self.restricted_budget_bytes:
                    break
                del decoders[old]
                self._restricted.pop((thread, *old), None)
        decoders[key] = made
        return made

    def restriction_refused(self, folder: Path, keep: Sequence[int]) -> str | None:
        """Why a restricted decoder of ``folder`` cannot be built here, or None when it can
        (checked once per folder by building one that keeps ``keep``, e.g. the special
        tokens, and dropping it). With Intel MKL's GEMM, CTranslate2 packs every linear
        weight at load (``CT2_PACKED_GEMM``, on by default with MKL), and the rows of a
        packed output layer cannot be gathered ("Can't select pre-packed weight")."""
        with self._lock:
            if str(folder) in self._refusals:
                return self._refusals[str(folder)]
        try:
            self.module.PrefillDecoder(str(folder), self._threads, sorted(int(i) for i in keep))
            reason = None
        except (RuntimeError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
        with self._lock:
            self._refusals[str(folder)] = reason
        return reason

    def restricted_usage(self, thread: int | None = None) -> tuple[int, int]:
        """(restricted decoders held, their bytes) across threads, or by one ``thread`` (its
        ident). A thread evicts only its own decoders (the others' may be in use), so the
        total can pass the budget while other threads hold theirs; each thread's own stay
        within it (or one decoder, if that alone is larger)."""
        with self._lock:
            self._forget_ended()
            held = {k: v for k, v in self._restricted.items() if thread in (None, k[0])}
            return len(held), sum(held.values())

    def _forget_ended(self) -> None:
        """Drop the entries of threads that ended (worker threads replaced or closed); an
        ident reused by a new thread is a new owner (under ``_lock``)."""
        for ident in [i for i, owner in self._owners.items() if not owner.is_alive()]:
            self._drop_thread(ident)
            del self._owners[ident]

    def _drop_thread(self, ident: int) -> None:
        self._restricted = {k: v for k, v in self._restricted.items() if k[0] != ident}
