"""WebRTC audio for a WebSocket session: an aiortc peer per client.

Signalling rides on the session's WebSocket (``offer`` -> ``answer``, trickled ``ice``);
captions and status stay on the WebSocket. The peer

- always consumes the incoming audio track (aiortc queues unread frames without bound),
  resampling Opus's 48 kHz (usually stereo) to 16 kHz mono and pushing contiguous 20 ms
  ``AudioFrame``s into the session;
- sends translated speech on an outgoing track paced in 20 ms frames (``SpeechTrack``),
  silence when there is nothing to say;
- fails with ``webrtc_timeout`` when ICE + DTLS do not complete in time, and with
  ``bad_sdp`` when the offer is garbage (anything ``setRemoteDescription`` raises).

The WebSocket server imports this module lazily, so it runs (without WebRTC) when aiortc
is missing.
"""

from __future__ import annotations

import asyncio
import collections
import fractions
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import av
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from aiortc.sdp import candidate_from_sdp
from numpy.typing import NDArray

from speechpipe.errors import SessionError
from speechpipe.stages.channels import ChannelClosed
from speechpipe.stages.frames import STREAM_RATE, AudioFrame, SpeechChunk
from speechpipe.transport.audio_io import InputResampler
from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.protocol import Ice, ProtocolError

__all__ = ["WebRtcPeer", "SpeechTrack", "PeerError", "RTC_RATE", "RTC_FRAME_SAMPLES"]

log = logging.getLogger("speechpipe.webrtc")

RTC_RATE = 48_000
RTC_FRAME_SAMPLES = 960  # 20 ms at 48 kHz


class PeerError(SessionError):
    """The peer connection failed or timed out; the WebSocket session goes on."""


class SpeechTrack(MediaStreamTrack):
    """Outgoing audio: queued speech at 48 kHz mono, paced at 20 ms per frame.

    ``recv`` is awaited by aiortc's sender; it sleeps until the frame's wall-clock time, so
    speech plays in real time and silence fills the gaps. The queue holds at most
    ``max_backlog_s`` of speech: beyond that the oldest phrases are dropped (counted).
    """

    kind = "audio"

    def __init__(self, max_backlog_s: float = 30.0) -> None:
        super().__init__()
        self.max_backlog = int(max_backlog_s * RTC_RATE)
        self._queue: collections.deque[NDArray[np.int16]] = collections.deque()
        self._offset = 0  # samples of _queue[0] already sent
        self.backlog = 0
        self.dropped_samples = 0
        self.frames_sent = 0
        self.speech_frames_sent = 0
        self._start: float | None = None
        self._timestamp = 0
        self._empty = asyncio.Event()
        self._empty.set()

    def play(self, samples: NDArray[np.int16]) -> None:
        """Queue speech to send; drop the oldest queued audio beyond ``max_backlog``."""
        if len(samples) == 0:
            return
        self._queue.append(np.asarray(samples, dtype=np.int16))
        self.backlog += len(samples)
        self._empty.clear()
        while self.backlog > self.max_backlog and len(self._queue) > 1:
            dropped = self._queue.popleft()
            self.backlog -= len(dropped) - self._offset
            self.dropped_samples += len(dropped) - self._offset
            self._offset = 0

    async def drained(self) -> None:
        """Wait until every queued sample has been sent (or the track stops)."""
        await self._empty.wait()

    def _take(self, n: int) -> NDArray[np.int16]:
        out = np.zeros(n, dtype=np.int16)
        filled = 0
        while filled < n and self._queue:
            head = self._queue[0]
            take = min(n - filled, len(head) - self._offset)
            out[filled : filled + take] = head[self._offset : self._offset + take]
            filled += take
            self._offset += take
            if self._offset == len(head):
                self._queue.popleft()
                self._offset = 0
        self.backlog -= filled
        if filled:
            self.speech_frames_sent += 1
        if not self._queue:
            self._empty.set()
        return out

    async def recv(self) -> Any:
        """The next frame at real-time pace: queued speech, or silence when none is queued."""
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._timestamp += RTC_FRAME_SAMPLES
            wait = self._start + self._timestamp / RTC_RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        samples = self._take(RTC_FRAME_SAMPLES)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RTC_RATE
        frame.pts = self._timestamp
        frame.time_base = fractions.Fraction(1, RTC_RATE)
        self.frames_sent += 1
        return frame

    def stop(self) -> None:
        """End the track and release anyone waiting in ``drained``."""
        super().stop()
        self._empty.set()


def to_rtc_rate(chunk: SpeechChunk) -> NDArray[np.int16]:
    """The chunk's samples resampled to the WebRTC rate."""
    samples = np.asarray(chunk.samples, dtype=np.int16)
    if chunk.sample_rate == RTC_RATE or len(samples) == 0:
        return samples
    import soxr

    return np.asarray(soxr.resample(samples, chunk.sample_rate, RTC_RATE), dtype=np.int16)


class WebRtcPeer:
    """One client's peer connection, fed from and feeding one session.

    ``accept_offer`` -> answer SDP; then ``run()`` until the peer ends (raises ``PeerError``
    on timeout/failure); ``play`` queues translated speech; ``close`` is idempotent.
    """

    def __init__(
        self,
        *,
        push: Callable[[AudioFrame], Awaitable[None]],
        start_pts: int = 0,
        connect_timeout_s: float = 15.0,
        max_backlog_s: float = 30.0,
        label: str = "",
    ) -> None:
        self._push = push
        self._chunker = InputResampler(STREAM_RATE, start_pts=start_pts)
        self.connect_timeout_s = connect_timeout_s
        self.label = label
        self.track = SpeechTrack(max_backlog_s)
        self.pc: Any = None
        self._input_open = True
        self._connected = asyncio.Event()
        self._ended = asyncio.Event()
        self._failed = False
        self._remote: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._drains: set[asyncio.Task[None]] = set()
        self.frames_in = 0
        self._closed = False

    @property
    def pts(self) -> int:
        """The stream position after the last frame pushed."""
        return self._chunker.pts

    @property
    def connected(self) -> bool:
        """Whether ICE/DTLS completed and the connection has not ended."""
        return self._connected.is_set() and not self._ended.is_set()

    async def accept_offer(self, sdp: str) -> str:
        """Apply the client's SDP offer and return the answer SDP; ``ProtocolError`` if bad."""
        # No ICE servers: aiortc would otherwise ask a public STUN server.
        self.pc = pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))

        @pc.on("track")
        def on_track(track: Any) -> None:
            if track.kind == "audio" and not self._remote.done():
                self._remote.set_result(track)
            else:  # always read what arrives, even tracks we do not use
                task = asyncio.ensure_future(_drain(track))
                self._drains.add(task)
                task.add_done_callback(self._drains.discard)

        @pc.on("connectionstatechange")
        def on_state() -> None:
            state = pc.connectionState
            if state == "connected":
                self._connected.set()
            elif state in ("failed", "closed"):
                self._failed = self._failed or state == "failed"
                self._ended.set()

        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        except Exception as exc:  # aiortc raises ValueError, KeyError, IndexError, ...
            raise ProtocolError(
                ErrorCode.BAD_SDP, f"offer rejected ({type(exc).__name__}): {str(exc)[:160]}"
            ) from None
        transceivers = pc.getTransceivers()
        if not any(t.kind == "audio" for t in transceivers):
            raise ProtocolError(ErrorCode.BAD_SDP, "offer has no audio media section")
        for transceiver in transceivers:
            if transceiver.kind != "audio":
                transceiver.direction = "inactive"
        try:
            pc.addTrack(self.track)
            answer = await pc.createAnswer()
            await pc.setLocalDescription(answer)
        except Exception as exc:
            raise ProtocolError(
                ErrorCode.BAD_SDP, f"cannot answer the offer ({type(exc).__name__})"
            ) from None
        log.info("peer %s: answer ready", self.label)
        return str(pc.localDescription.sdp)

    async def add_ice(self, ice: Ice) -> None:
        """Add a trickled ICE candidate (None: end of candidates); ``ProtocolError`` if bad."""
        if self.pc is None:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "'ice' before 'offer'")
        try:
            if ice.candidate is None:
                await self.pc.addIceCandidate(None)
                return
            text = ice.candidate
            if text.startswith("candidate:"):
                text = text[len("candidate:") :]
            candidate = candidate_from_sdp(text)
            candidate.sdpMid = ice.sdp_mid
            candidate.sdpMLineIndex = ice.sdp_mline_index
            if candidate.sdpMid is None and candidate.sdpMLineIndex is None:
                candidate.sdpMLineIndex = 0
            await self.pc.addIceCandidate(candidate)
        except Exception as exc:
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"bad ICE candidate ({type(exc).__name__})"
            ) from None

    def play(self, chunk: SpeechChunk) -> None:
        """Queue a speech chunk on the outgoing track."""
        self.track.play(to_rtc_rate(chunk))

    def stop_input(self) -> None:
        """Stop pushing audio into the session (after ``stop``); incoming frames are still read."""
        self._input_open = False

    async def drain(self, extra_s: float = 1.0) -> None:
        """Wait until queued speech has been sent (bounded: an unconnected peer never sends)."""
        if not self.connected:
            return
        limit = self.track.backlog / RTC_RATE + extra_s
        try:
            async with asyncio.timeout(limit):
                await self.track.drained()
        except TimeoutError:
            pass

    async def run(self) -> None:
        """Push incoming audio into the session until the peer ends; ``PeerError`` on failure."""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch())
                tg.create_task(self._consume())
        except ExceptionGroup as group:
            for exc in group.exceptions:
                if isinstance(exc, PeerError):
                    raise exc from None
            raise

    async def _watch(self) -> None:
        connected = asyncio.ensure_future(self._connected.wait())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            done, _ = await asyncio.wait(
                {connected, ended}, timeout=self.connect_timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            connected.cancel()
            ended.cancel()
        if not done:
            raise PeerError(
                f"ICE/DTLS did not complete within {self.connect_timeout_s:g} s",
                code=ErrorCode.WEBRTC_TIMEOUT,
            )
        if not self._ended.is_set():
            log.info("peer %s: connected", self.label)
            await self._ended.wait()
        if self._failed:
            raise PeerError("the WebRTC connection failed", code=ErrorCode.WEBRTC_FAILED)
        await self.close()

    async def _consume(self) -> None:
        try:
            track = await self._remote
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return  # the peer closed before any track arrived
        resampler = av.AudioResampler(format="s16", layout="mono", rate=STREAM_RATE)
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.frames_in += 1
            for out in resampler.resample(frame):
                if not self._input_open:
                    continue
                samples = out.to_ndarray().reshape(-1).astype(np.int16, copy=False)
                for audio in self._chunker.feed(samples):
                    try:
                        await self._push(audio)
                    except ChannelClosed:
                        self._input_open = False
                        break

    async def close(self) -> None:
        """Stop the tracks and close the peer connection; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._input_open = False
        self.track.stop()
        for task in list(self._drains):
            task.cancel()
        if not self._remote.done():
            self._remote.cancel()
        if self.pc is not None:
            await self.pc.close()
        self._ended.set()
        log.info("peer %s: closed (frames in=%d out=%d)", self.label, self.frames_in,
                 self.track.frames_sent)


async def _drain(track: Any) -> None:
    while True:
        try:
            await track.recv()
        except MediaStreamError:
            return
