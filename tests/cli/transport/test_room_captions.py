"""``GET /rooms/ID/captions.vtt`` over a real server on loopback (a scripted session: no
models), its answers read back with ``webvtt-py``."""

from __future__ import annotations

import asyncio
import io
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import webvtt
from websockets.asyncio.client import connect

from speechpipe.transport.auth import TokenAuthority
from speechpipe.transport.limits import ServerLimits
from speechpipe.transport.websocket_server import SpeechServer
from tests.fakes import TickFactory
from tests.helpers import FAKE_TARGET, SECRET, pcm, recv_json, wait_for

AUTH = TokenAuthority(SECRET)


@pytest_asyncio.fixture(loop_scope="session")
async def server() -> AsyncIterator[SpeechServer]:
    async with SpeechServer(TickFactory(), limits=ServerLimits(auth=AUTH)) as srv:
        yield srv


def get(srv: SpeechServer, path: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{srv.port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_route_gives_a_live_rooms_captions_to_its_listeners(
    server: SpeechServer,
) -> None:
    speaker = await connect(f"ws://127.0.0.1:{server.port}/ws")
    await speaker.send(json.dumps({"type": "start", "role": "speaker",
                                   "token": AUTH.issue(ttl_s=60)}))
    room = (await recv_json(speaker))["room"]
    await speaker.send(pcm(1.0))  # the scripted session captions each second of audio
    await wait_for(lambda: server.rooms.captions.cues(server.rooms.room_of(room), "en"))
    path = f"/rooms/{room}/captions.vtt?lang=en"
    listener = AUTH.issue(ttl_s=60, role="listener", room=room)
    status, kind, body = await asyncio.to_thread(get, server, path, listener)
    assert status == 200 and kind.startswith("text/vtt"), body
    cues = list(webvtt.from_buffer(io.StringIO(body)))
    assert [c.text for c in cues] == [FAKE_TARGET]
    # the query's token works too (a link), a token for another room does not
    assert (await asyncio.to_thread(get, server, f"{path}&token={listener}"))[0] == 200
    other = AUTH.issue(ttl_s=60, role="listener", room="another-room")
    assert (await asyncio.to_thread(get, server, path, other))[0] == 403
    assert (await asyncio.to_thread(get, server, path))[0] == 401
    assert (await asyncio.to_thread(get, server, path, "not-a-token"))[0] == 401
    general = AUTH.issue(ttl_s=60)
    assert (await asyncio.to_thread(get, server, f"/rooms/{room}/captions.vtt", general))[0] == 400
    assert (await asyncio.to_thread(get, server, f"/rooms/{room}/captions.vtt?lang=e%0a",
                                    general))[0] == 400
    missing = await asyncio.to_thread(get, server, "/rooms/no-such-room/captions.vtt?lang=en",
                                      general)
    assert missing[0] == 404 and "no such room" in missing[2]
    await speaker.send(json.dumps({"type": "stop"}))
    await speaker.wait_closed()
    await wait_for(lambda: not server.rooms.registry.rooms)
    assert (await asyncio.to_thread(get, server, path, listener))[0] == 404  # it ended
