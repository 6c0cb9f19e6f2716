"""``bench load``'s one client: stream a playlist at real time (the one protocol client,
``transport.client.stream_session``), and what it heard: commit latencies, StartOffset and
EndOffset per utterance, the EndOffset's split, the words committed by the speech end, the
offsets per recording of a playlist."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from speechpipe.bench.clips import RATE
from speechpipe.evaluation.scores import end_offset_parts, laid_back_to_back
from speechpipe.transport.client import ClientRun, stream_session

__all__ = ["ClientRun", "run_client", "commit_latencies",
           "utterance_offsets", "end_offset_split", "committed_by_end", "recording_offsets",
           "recording_owner"]

# -- one client -------------------------------------------------------------------------------
async def run_client(url: str, index: int, audio: np.ndarray, lang: str, *,
                     frame_ms: int = 20, tail_s: float = 2.0, timeout_s: float = 180.0,
                     output_rate: int = 16_000, target_lang: str = "en",
                     begin: asyncio.Event | None = None,
                     on_message: Callable[[str | bytes], None] | None = None) -> ClientRun:
    """One client: stream its playlist at real time and record every event (the one
    protocol client, ``transport.client.stream_session``); ``begin``: the audio starts once
    it is set (the stream clock starts then). No session is served speech synthesized
    earlier for another, nor for itself at an earlier level: the bench servers give each
    session a phrase cache of its own (``server_process.BENCH_SERVE_ARGS``)."""
    from websockets.exceptions import ConnectionClosed

    try:
        async with asyncio.timeout(timeout_s):
            return await stream_session(
                url, audio, rate=RATE, frame_ms=frame_ms, tail_s=tail_s, index=index,
                start={"source_lang": lang, "target_lang": target_lang,
                       "output_sample_rate": output_rate},
                begin=begin, on_message=on_message)
    except TimeoutError:
        return ClientRun(index, error="timeout")
    except (OSError, ConnectionClosed) as exc:
        return ClientRun(index, error=type(exc).__name__)


# -- what one client saw: ``transport.client.ClientRun`` -------------------------------
def commit_latencies(events: Sequence[dict[str, Any]], side: str) -> list[float]:
    """``stream_t - audio_end`` of every ``side`` event whose committed text grew."""
    committed: dict[int, str] = {}
    out = []
    for event in events:
        if event.get("type") != side:
            continue
        utterance = event["utterance"]
        if len(event["committed"]) > len(committed.get(utterance, "")):
            out.append(float(event["stream_t"]) - float(event["audio_end"]))
        committed[utterance] = event["committed"]
    return out


def utterance_offsets(run: ClientRun) -> tuple[list[float], list[float]]:
    """(StartOffsets, EndOffsets) per utterance, as the client hears the speech."""
    starts = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "start"}
    ends = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "end"}
    chunks = _chunks(run)
    first_audio: dict[int, float] = {}
    for arrived, u, _ in chunks:
        first_audio.setdefault(u, arrived)
    laid_end = _laid_ends(chunks)
    start_offsets = [first_audio[u] - t for u, t in starts.items() if u in first_audio]
    end_offsets = [laid_end[u] - t for u, t in ends.items() if u in laid_end]
    return start_offsets, end_offsets


def end_offset_split(run: ClientRun) -> list[tuple[float, float, float]]:
    """Where each utterance's EndOffset goes, as ``(queued, late, silence)`` seconds that add
    up to it: speech already received when the speaker stopped and still to play (*queued*,
    whichever utterance it belongs to), the utterance's speech received only afterwards
    (*late*: words committed or synthesized after the end), and the output's idle time in
    between (*silence*: waiting for a commit or the synthesizer). Speech laid back to back as
    in ``utterance_offsets``; the split is ``evaluation.scores.end_offset_parts``, the one
    the trace's uses."""
    ends = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "end"}
    chunks = _chunks(run)
    laid = [(arrived, end, seconds) for (arrived, _, seconds), end
            in zip(chunks, laid_back_to_back((a, d) for a, _, d in chunks), strict=True)]
    out = []
    for utterance, end in ends.items():
        parts = end_offset_parts(laid, end, [u == utterance for _, u, _ in chunks])
        if parts is not None:
            out.append(parts)
    return out


def committed_by_end(run: ClientRun) -> list[tuple[float, float]]:
    """Per utterance, the share of its final committed words (captions, translation) that
    were already committed when the speaker stopped (the VAD's speech end, on the client's
    stream clock). What is not is committed later, at the pause: spoken after the end.
    Utterances with no committed words on either side are left out."""
    ends = {e["utterance"]: e["t"] for e in run.of("vad") if e["kind"] == "end"}
    at_end: dict[tuple[str, int], int] = {}
    final: dict[tuple[str, int], int] = {}
    for arrived, event in run.events:
        side, utterance = str(event.get("type")), event.get("utterance")
        if side not in ("source", "target") or not isinstance(utterance, int) \
                or utterance not in ends:
            continue
        words = len(event["committed"].split())
        final[side, utterance] = words
        if arrived <= ends[utterance]:
            at_end[side, utterance] = words
    return [(at_end.get(("source", u), 0) / final["source", u],
             at_end.get(("target", u), 0) / final["target", u])
            for u in ends if final.get(("source", u)) and final.get(("target", u))]


def _chunks(run: ClientRun) -> list[tuple[float, int, float]]:
    """``(arrived, utterance, seconds)`` of each speech chunk the client received."""
    return [(arrived, header["utterance"], header["samples"] / header["sample_rate"])
            for arrived, header, _ in run.audio]


def _laid_ends(chunks: Sequence[tuple[float, int, float]]) -> dict[int, float]:
    """Per utterance, where its speech ends when every chunk is played as it arrives, after
    the speech before it (back to back)."""
    laid_end: dict[int, float] = {}
    for (_, utterance, _), end in zip(
            chunks, laid_back_to_back((a, d) for a, _, d in chunks), strict=True):
        laid_end[utterance] = end
    return laid_end


def recording_owner(start_t: float, spans: Sequence[tuple[float, float]]) -> int:
    """The recording a server utterance starting at ``start_t`` (its ``vad`` start, stream
    clock) belongs to: the one whose speech is nearest after the silence it started in. The
    boundaries are the middles of the silences between recordings. A VAD start lies before
    the recording's first voiced frame by the VAD's pre-roll and start window (0.3 + 0.2 s
    by default) and more where the speech starts softly, so a fixed margin before the first
    voiced frame gave a recording's utterance to the one before it: that recording was
    "not heard", and the one before it "ended" with the next one's speech."""
    owner = 0
    for k in range(1, len(spans)):
        if start_t >= (spans[k - 1][1] + spans[k][0]) / 2:
            owner = k
    return owner


def recording_offsets(
    run: ClientRun, spans: Sequence[tuple[float, float]],
) -> list[tuple[float, float] | None]:
    """Per recording of a playlist (its voiced span on the stream clock, ``spans`` in
    order): (first translated audio after its first voiced frame, end of its translated audio
    after its last voiced frame), judged at the client: arrival on the client's clock, chunks
    laid back to back (``evaluation.scores.laid_back_to_back``). The server's utterances
    belong to the recording whose speech they started nearest to (``recording_owner``);
    None for a recording of which no translated audio arrived."""
    if not spans:
        return []
    owner = {e["utterance"]: recording_owner(e["t"], spans)
             for e in run.of("vad") if e["kind"] == "start"}
    chunks = _chunks(run)
    firsts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for (arrived, utterance, _), end in zip(
            chunks, laid_back_to_back((a, d) for a, _, d in chunks), strict=True):
        if utterance not in owner:
            continue
        firsts.setdefault(owner[utterance], arrived)
        ends[owner[utterance]] = end
    return [(firsts[k] - first, ends[k] - end) if k in firsts else None
            for k, (first, end) in enumerate(spans)]
