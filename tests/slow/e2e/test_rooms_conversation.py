"""A two-participant conversation over real WebSockets, real models, real recordings: one
participant speaks Spanish, the other English. Each participant's "microphone" also hears the
translated speech its device plays (back to back from when it arrived, at full level): the
worst echo a device without echo cancellation makes.

With the server's echo guard (hold a participant's input while its received speech plays),
the echo produces no new captions or translation; with the guard off, the same run does
produce them — the measurement that picked the rule, and the proof that the check can fail."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from speechpipe.transport.codes import CloseCode
from speechpipe.transport.file_replay import read_audio
from speechpipe.transport.limits import RoomOptions, ServerLimits
from tests.helpers import english_only, manifest_clip, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

ENGLISH_CLIP = "en_enh_890_epst"
FRAME = 320  # 20 ms at 16 kHz


@dataclass
class Party:
    """One participant's client: what it received, and when its own speech began."""

    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    audio: list[tuple[str, bytes]] = field(default_factory=list)  # (speaker, pcm)
    started: dict[str, Any] = field(default_factory=dict)
    speech_began: float | None = None
    echo_samples: int = 0  # samples of received speech its microphone replayed
    close_code: int | None = None

    def of(self, kind: str, speaker: str | None = None) -> list[dict[str, Any]]:
        return [e for _, e in self.events if e.get("type") == kind
                and (speaker is None or e.get("speaker") == speaker)]


async def participant(url: str, party: Party, start: dict[str, Any], clip: np.ndarray,
                      speak_at: asyncio.Event, done: asyncio.Event,
                      finished: asyncio.Event) -> None:
    """Stream 20 ms frames at real time: its microphone = its own clip once ``speak_at`` is
    set and the speech it received has been quiet 1.5 s, plus the replay of that speech.
    Sends ``stop`` once ``done`` is set (after its own clip)."""
    from websockets.asyncio.client import connect

    playing: deque[int] = deque()  # the device's playback queue (samples)
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "start", "role": "participant", **start}))
        party.started = json.loads(await ws.recv())
        assert party.started["type"] == "started", party.started

        async def receive() -> None:
            header: dict[str, Any] | None = None
            with contextlib.suppress(Exception):
                async for message in ws:
                    if isinstance(message, bytes):
                        assert header is not None
                        party.audio.append((header["speaker"], message))
                        playing.extend(np.frombuffer(message, "<i2").tolist())
                        header = None
                        continue
                    event = json.loads(message)
                    party.events.append((time.monotonic(), event))
                    if event["type"] == "audio":
                        assert event["sample_rate"] == 16000
                        header = event

        receiver = asyncio.create_task(receive())
        t0 = time.monotonic()
        own = 0  # samples of its own clip sent
        quiet_since = t0
        tick = 0
        while True:
            delay = t0 + tick * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tick += 1
            frame = np.zeros(FRAME, np.float64)
            if playing:
                quiet_since = time.monotonic()
                echo = [playing.popleft() for _ in range(min(FRAME, len(playing)))]
                frame[: len(echo)] += echo
                party.echo_samples += len(echo)
            speaking = speak_at.is_set() and (party.speech_began is not None
                                              or time.monotonic() - quiet_since > 1.5)
            if speaking and own < len(clip):
                if party.speech_began is None:
                    party.speech_began = time.monotonic()
                part = clip[own : own + FRAME]
                frame[: len(part)] += part
                own += len(part)
                if own >= len(clip):
                    finished.set()
            if done.is_set():
                break
            await ws.send(np.clip(frame, -32768, 32767).astype("<i2").tobytes())
        await ws.send(json.dumps({"type": "stop"}))
        async with asyncio.timeout(60):
            await receiver
        party.close_code = ws.close_code


async def converse(pipeline: Any, *, echo_guard: bool,
                   mt: str = "") -> tuple[Party, Party, dict[str, Any]]:
    from speechpipe.server.serve import ServerApp

    es_path, es_entry = manifest_clip("es_enh_12411_cv")
    en_path, en_entry = manifest_clip(ENGLISH_CLIP)
    es_clip, en_clip = read_audio(es_path), read_audio(en_path)
    app = ServerApp("127.0.0.1", 0, pipeline=pipeline,
                    limits=ServerLimits(rooms=RoomOptions(echo_guard=echo_guard, mt=mt)))
    await app.start()
    await app.load()
    url = f"ws://127.0.0.1:{app.server.port}/ws"
    spanish, english = Party(), Party()
    go_es, go_en, es_done, en_done, stop = (asyncio.Event() for _ in range(5))
    try:
        async with asyncio.timeout(150):
            # the Spanish participant opens the room; the English one joins it
            first = asyncio.create_task(participant(
                url, spanish, {"source_lang": "es", "target_lang": "es"}, es_clip,
                go_es, stop, es_done))
            await wait_for(lambda: bool(spanish.started), within=30, what="room opened")
            room = spanish.started["room"]
            second = asyncio.create_task(participant(
                url, english, {"source_lang": "en", "target_lang": "en", "room": room,
                       "invite": spanish.started["invite"]},
                en_clip, go_en, stop, en_done))
            await wait_for(lambda: bool(english.started), within=30, what="joined")
            await asyncio.sleep(1.0)
            go_es.set()
            await es_done.wait()
            await asyncio.sleep(2.0)
            go_en.set()  # speaks once the Spanish translation it hears has played out
            await en_done.wait()
            await asyncio.sleep(5.0)
            stop.set()
            await first
            await second
    finally:
        await app.stop(close_pipeline=False)
    return spanish, english, {"es": es_entry, "en": en_entry}


def words(text: str) -> set[str]:
    return {w.strip(".,;:!?¿¡\"'").lower() for w in text.split()} - {""}


def final_text(events: list[dict[str, Any]]) -> str:
    last: dict[int, str] = {}
    for e in events:
        last[e["utterance"]] = e["committed"] + " " + e["tentative"]
    return " ".join(last[k] for k in sorted(last))


@pytest.mark.parametrize(("echo_guard", "tiny_mt"),
                         [(True, ""), (False, ""), (True, "flag"), (True, "installed")],
                         ids=["guard", "no-guard", "guard-tiny-mt", "guard-installed-pair"])
async def test_a_conversation_translates_each_way_and_the_echo_makes_nothing(
    pipeline: Any, echo_guard: bool, tiny_mt: str, tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    english_only(monkeypatch, tmp_path)  # no Apertium pair, no espeak-ng voice: a server
    # with no en->es engine but what this test installs
    mt = ""
    if tiny_mt:  # the tests' own tiny en<->es model (random weights: the words mean nothing)
        from speechpipe.bench.tiny_mt import build_tiny_mt

        model = build_tiny_mt(tmp_path / 'tiny-nllb', 'nllb')
        if tiny_mt == "flag":  # the server's --mt for rooms
            mt = f"ct2:{model}"
        else:  # an en->es pair installed in a fresh home: --mt auto (the default) uses it
            # for the English speaker, Whisper's English stays for the Spanish one
            from speechpipe.bench.tiny_mt import build_tiny_pair
            from speechpipe.cli import main

            monkeypatch.setenv("SPEECHPIPE_HOME", str(tmp_path / "home"))
            pair = build_tiny_pair(tmp_path / "tiny-en-es", "en", "es")
            assert main(["models", "add", str(pair), "--name", "tiny-en-es"]) == 0
    spanish, english, refs = await converse(pipeline, echo_guard=echo_guard, mt=mt)
    es_id, en_id = spanish.started["session"], english.started["session"]
    assert spanish.close_code == english.close_code == CloseCode.NORMAL
    assert english.echo_samples > 16000, "the English device played (and its mic heard) speech"

    # what the English participant got from the Spanish one: English text and speech
    heard = final_text(english.of("target", es_id))
    assert len(words(heard) & words(refs["es"]["translation_en"]) - {"the", "a", "of"}) >= 2
    assert english.audio and {s for s, _ in english.audio} == {es_id}, "never its own voice"
    # what the Spanish participant got from the English one: the English captions, and
    # with an en->es model its translation too (no Spanish voice here: no speech, and why)
    statuses = {e["status"] for e in spanish.of("status", en_id)}
    if tiny_mt:
        assert "speech_unavailable" in statuses and "translation_unavailable" not in statuses
        translated = spanish.of("target", en_id)
        assert translated and all(e["language"] == "es" for e in translated)
        assert any(e["committed"] for e in translated), "a translation was committed"
    else:
        assert "translation_unavailable" in statuses
        assert not spanish.of("target", en_id)
    assert not spanish.audio, "no Spanish voice here: captions only, no invented speech"
    # the English participant's speech as the Spanish one saw it
    assert english.speech_began is not None
    before = [e for t, e in spanish.events if e.get("speaker") == en_id
              and e["type"] == "source" and t < english.speech_began and (
                  e["committed"] or e["tentative"])]
    said = final_text(spanish.of("source", en_id))
    assert len(words(said) & words(refs["en"]["transcript"])) >= 3, said
    if echo_guard:
        assert before == [], f"the echo came back as the English participant's words: {before}"
    else:  # the rule is what makes the difference: without it the echo is transcribed
        assert before, "without the guard the replayed translation should come back as words"
    # own captions only from oneself: never own target or speech
    assert not english.of("target", en_id) and not english.of("audio", en_id)
