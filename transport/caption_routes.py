"""``GET /rooms/ID/captions.vtt?lang=xx``: a live room's captions so far, as WebVTT.

Authorized like a listener: on a server with tokens (``--auth-secret`` / ``--token``) the
request carries one (``Authorization: Bearer``, or ``?token=``), and a token for another room
(its ``room`` claim) is refused; without tokens the room id, a 192-bit capability, is the
right to listen. A conversation whose opener keeps its history from listeners does not hand
it out here either. Answers: 200 (``text/vtt``; a room without captions in that language yet
is an empty WebVTT file), 400 (no or malformed ``lang``), 401 (token), 403 (another room's
token, or history withheld), 404 (no such room: it ended, or the link is wrong). Nothing here
logs the room id, the token or the query string.
"""

from __future__ import annotations

import http
import re
import urllib.parse

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from speechpipe.transport.auth import AuthError, TokenVerifier, token_from_request
from speechpipe.transport.room_shell import RoomHub

__all__ = ["CaptionRoutes", "CAPTIONS_PATH"]

CAPTIONS_PATH = re.compile(r"/rooms/([A-Za-z0-9_-]{1,64})/captions\.vtt")
_LANG = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}")


def _answer(status: int, body: str, content_type: str = "text/plain; charset=utf-8",
            extra: tuple[tuple[str, str], ...] = ()) -> Response:
    data = body.encode("utf-8")
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(data))),
                       ("Cache-Control", "no-store"), ("Connection", "close"), *extra])
    return Response(status, http.HTTPStatus(status).phrase, headers, data)


class CaptionRoutes:
    """The captions download (see the module docs)."""

    def __init__(self, hub: RoomHub, verifier: TokenVerifier | None) -> None:
        self.hub = hub
        self.verifier = verifier

    def __call__(self, request: Request) -> Response | None:
        """The answer for a ``/rooms/...`` path, None for any other path."""
        path, _, query = request.path.partition("?")
        if not path.startswith("/rooms/"):
            return None
        match = CAPTIONS_PATH.fullmatch(path)
        if match is None:
            return _answer(404, "not found\n")
        langs = urllib.parse.parse_qs(query).get("lang", [])
        if len(langs) != 1 or not _LANG.fullmatch(langs[0]):
            return _answer(400, "give the captions' language: ?lang=xx (e.g. en, es, pt-BR)\n")
        room_id = match.group(1)
        claimed: str | None = None
        if self.verifier is not None:
            try:
                identity = self.verifier.verify(
                    token_from_request(request.path, request.headers.raw_items()))
            except AuthError as exc:
                return _answer(401, f"{exc}\n",
                               extra=(("WWW-Authenticate", 'Bearer error="invalid_token"'),))
            claimed = identity.room
        if claimed is not None and claimed != room_id:
            return _answer(403, "this token is for another room\n")
        room = self.hub.registry.rooms.get(room_id)
        if room is None:
            return _answer(404, "no such room (it ended, or the link is wrong)\n")
        if not getattr(room, "listener_history", True):
            return _answer(403, "this conversation does not share its history with listeners\n")
        return _answer(200, self.hub.captions.vtt(room, langs[0]), "text/vtt; charset=utf-8")
