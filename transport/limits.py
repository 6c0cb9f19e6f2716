"""The live server's transport options: connection limits and quotas (a leaf module).

``ServerLimits`` (``--set limits.*``) and ``Quotas`` (``--set quotas.*``) sit in the
configuration tree (``speechpipe.config``); this module imports no server, no websockets
library, so the tree can be read without loading a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speechpipe.transport.identity import TokenVerifier

__all__ = ["ServerLimits", "Quotas", "RoomOptions", "DEFAULT_MAX_UNREAD_BYTES", "MAX_MESSAGE_BYTES"]

# the protocol's message limit (``transport.protocol`` re-exports it; docs/protocol.md)
MAX_MESSAGE_BYTES = 1 << 17
"""Largest message the server accepts (128 KiB, ~1.4 s of 48 kHz audio); larger -> close 1009."""


@dataclass(frozen=True, slots=True)
class RoomOptions:
    """Rooms (``transport.room``): listener limits, outboxes, history, the echo guard."""

    max_listeners_per_room: int = 500  # 0: no limit
    max_listeners: int = 2000  # per server, over every room; 0: no limit
    outbox_capacity: int = 64  # messages a listener may be behind before it is closed (4012)
    listener_send_buffer: int = 128 * 1024  # a listener socket's kernel send buffer (SO_SNDBUF;
    # 0: the OS's, which grows to megabytes and hides a listener that stopped reading)
    history_s: float = 60.0  # committed captions a late joiner receives: the last this long
    history_items: int = 256  # ... and at most this many
    echo_guard: bool = True  # hold a participant's input while its received speech plays
    echo_tail_s: float = 0.5  # ... and this long after, for a client reporting no playout
    # clock (``playout``, transport.echo_guard): room reverb, the device's latency
    echo_report_tail_s: float = 0.25  # after the reported playout end (reverb, the mic's lag)
    echo_max_lag_s: float = 3.0  # a reported playout at most this far behind the server's
    mt: str = ""  # "ct2:MODEL": room pipelines into languages other than English use it
    captions_kept: int = 600  # utterances of captions per feed for captions.vtt; 0: none kept
    # listener joins (transport.room_access.JoinLimiter; over them: too_many_joins, 4016, with
    # retry_after_s and the turn booked for that listener); a room of 1000 joining within
    # 5 s, or 200 behind one address within 16 s, never trips them, and 200 behind one
    # address at once are seated by their turns within 17 s; a rate of 0 switches one off
    join_per_ip_s: float = 10.0  # listener joins per second from one client address
    join_ip_burst: int = 40  # listener joins at once from one address (> max_sessions_per_ip)
    join_per_room_s: float = 100.0  # listener joins per second into one room
    join_room_burst: int = 500  # listener joins at once into one room (a full room's worth)


@dataclass(frozen=True, slots=True)
class Quotas:
    """Limits per connection and per client; ``None`` (or 0 for counts) switches one off."""

    max_session_s: float | None = 4 * 3600.0
    expire_grace_s: float = 30.0  # after max_session_s: time to finish and send what is due
    max_idle_s: float | None = 60.0
    messages_per_s: float = 200.0  # 20 ms frames are 50/s; this leaves room for 5 ms frames
    message_burst: int = 500  # ~ max_lead_s of 20 ms frames arriving at once after a stall
    control_frames_per_s: float = 10.0  # of those, ping/pong/close frames (frame_guard)
    control_frame_burst: int = 20
    max_sdp_bytes: int = 32 * 1024  # browser offers are 2-8 KiB
    max_sessions_per_token: int | None = 4
    max_sessions_per_ip: int | None = 32
    client_ip_header: str | None = None  # e.g. X-Forwarded-For, only behind a trusted proxy
    audio_window_s: float | None = 20.0  # the audio pace rule (AudioPace); None: off
    min_audio_ratio: float = 0.5  # of real time, over every audio window


DEFAULT_MAX_UNREAD_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Limits and security settings of the WebSocket server."""
    max_message_bytes: int = MAX_MESSAGE_BYTES
    start_timeout_s: float = 30.0  # a connection must send ``start`` within this
    max_lead_s: float = 5.0  # how far audio may run ahead of the wall clock
    outgoing_capacity: int = 128  # messages queued for a slow client before the session waits
    webrtc_connect_timeout_s: float = 15.0  # ICE + DTLS must complete within this
    token: str | None = None  # when set, ``start`` must carry it
    auth: TokenVerifier | None = None  # signed session tokens (transport.auth); wins over token
    allowed_origins: tuple[str, ...] = ()  # WebSocket Origin allowlist; () = same origin only
    allowed_hosts: tuple[str, ...] = ()  # Host names served besides IPs and localhost (hosts.py)
    quotas: Quotas = field(default_factory=Quotas)  # transport.quotas
    rooms: RoomOptions = field(default_factory=RoomOptions)  # transport.room
    ping_interval_s: float | None = 20.0  # keepalive: a client that stops reading is dropped
    ping_timeout_s: float | None = 20.0
    close_timeout_s: float = 10.0  # wait this long for a closing handshake, then drop the TCP
    shutdown_grace_s: float = 5.0  # ``stop``: then drop what is still open (under 10 s SIGKILL)
    max_unread_bytes: int = DEFAULT_MAX_UNREAD_BYTES  # a client that reads less is dropped
    read_check_s: float = 5.0  # audio fell behind: a client not answering a ping in this long
    # is not reading (``not_reading``, 4011) rather than slow (``too_slow``, 4010)
    log_content: bool = False  # debug only: log captions/translations (never audio or tokens)
