"""A connection's WebRTC peer, its one lifecycle for a speaker and a listener alike.

The connection core (``transport.connection_core``) checks an ``offer``'s preconditions (no
peer active, WebRTC enabled, the SDP's size); ``PeerLink`` then performs it: loads aiortc
(``transport.webrtc``), answers the offer, sends the ``answer``, runs the peer in the
connection's task group until it ends, and closes it. What differs by role comes in as
parameters: where a speaker's microphone audio goes (``push``, from ``start_pts``) and what
happens when a peer ends (``on_end``: a speaker's WebSocket audio continues after it); a
listener's microphone is ignored. A peer that fails (ICE/DTLS timeout) reports a recoverable
``error``: the WebSocket stays, and the audio comes over it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from speechpipe.errors import SpeechpipeError
from speechpipe.stages.frames import AudioFrame
from speechpipe.transport.codes import ErrorCode
from speechpipe.transport.protocol import Ice, Offer, ProtocolError, dumps, encode_answer

if TYPE_CHECKING:
    from speechpipe.transport.webrtc import WebRtcPeer

__all__ = ["PeerLink", "Reply", "Send"]

log = logging.getLogger("speechpipe.server")

Send = Callable[[str], Awaitable[None]]
"""Send one text message to the client (in order with the connection's other messages)."""
Reply = Callable[[str, str], Awaitable[None]]
"""Report a recoverable error (``code``, ``message``) to the client and the metrics."""


async def _ignore(frame: AudioFrame) -> None:  # a listener does not speak
    return None


class PeerLink:
    """At most one WebRTC peer of one connection (``peer``: the active one, or None)."""

    def __init__(self, *, connect_timeout_s: float, label: str = "") -> None:
        self.connect_timeout_s = connect_timeout_s
        self.label = label
        self.peer: WebRtcPeer | None = None
        self._send: Send | None = None
        self._reply: Reply | None = None

    def attach(self, send_answer: Send, reply: Reply, label: str) -> None:
        """Where the ``answer`` and the peer's errors go (a speaker's outgoing channel, a
        listener's outbox), and the session's id (its ``label``): set when the session
        runs, before any offer."""
        self._send = send_answer
        self._reply = reply
        self.label = label

    @property
    def frames_in(self) -> int:
        """Audio frames received over the active peer (activity for the idle timer)."""
        return self.peer.frames_in if self.peer is not None else 0

    async def offer(
        self, offer: Offer, tg: asyncio.TaskGroup, *,
        push: Callable[[AudioFrame], Awaitable[None]] | None = None,
        prepare: Callable[[], Awaitable[int]] | None = None,
        on_end: Callable[[WebRtcPeer], None] | None = None,
    ) -> None:
        """Answer ``offer`` and run its peer in ``tg``. ``push``: where the client's audio
        goes (None: ignored, a listener's); ``prepare``: awaited once aiortc loads, before
        the peer exists, returning the ``pts`` its audio starts at; ``on_end``: called with
        the peer when it ends while still the active one."""
        assert self._send is not None and self._reply is not None, "PeerLink not attached"
        try:
            from speechpipe.transport.webrtc import WebRtcPeer
        except ImportError as exc:  # aiortc is a declared dependency; say what is missing
            await self._reply(ErrorCode.WEBRTC_FAILED, f"WebRTC unavailable: {exc}")
            return
        start_pts = await prepare() if prepare is not None else 0
        peer = WebRtcPeer(push=push or _ignore, start_pts=start_pts,
                          connect_timeout_s=self.connect_timeout_s, label=self.label)
        try:
            answer = await peer.accept_offer(offer.sdp)
        except ProtocolError as exc:
            await peer.close()
            await self._reply(exc.code, str(exc))
            return
        self.peer = peer
        await self._send(dumps(encode_answer(answer)))
        tg.create_task(self._run(peer, on_end), name=f"{self.label}:webrtc")

    async def _run(self, peer: WebRtcPeer, on_end: Callable[[WebRtcPeer], None] | None) -> None:
        assert self._reply is not None
        try:
            await peer.run()
        except SpeechpipeError as exc:  # ICE/DTLS timeout or failure: the WebSocket stays
            log.info("session %s: webrtc peer ended: %s", self.label, exc.code)
            await self._reply(exc.code, str(exc))
        finally:
            if self.peer is peer:
                self.peer = None
                if on_end is not None:
                    on_end(peer)
            await peer.close()

    async def add_ice(self, ice: Ice) -> None:
        """A trickled candidate for the active peer (a bad one: a recoverable error)."""
        assert self._reply is not None
        if self.peer is None:
            return
        try:
            await self.peer.add_ice(ice)
        except ProtocolError as exc:
            await self._reply(exc.code, str(exc))

    async def close(self) -> None:
        """Close the active peer, if any."""
        peer, self.peer = self.peer, None
        if peer is not None:
            await peer.close()
