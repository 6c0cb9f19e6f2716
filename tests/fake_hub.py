"""A local stand-in for the Hugging Face hub on loopback, speaking the part of its protocol
that ``huggingface_hub`` downloads use: ``GET /api/models/REPO/revision/REV`` (the file list
and commit) and ``HEAD``/``GET /REPO/resolve/REV/FILE`` (``X-Repo-Commit``, ``ETag`` = the
file's SHA-256 as for large files, ``Content-Length``, ``Range`` resumes).

Faults for the tests: ``cut_once`` (the first GET of a file sends half of it, then the
connection drops), ``corrupt`` (the bytes differ from the SHA-256 announced)."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.cut_once: set[str] = set()
        self.corrupt: set[str] = set()
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Range
        self._server: ThreadingHTTPServer | None = None

    def add_folder(self, repo: str, folder: Path, prefix: str = "") -> None:
        files = self.repos.setdefault(repo, {})
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                files[prefix + path.relative_to(folder).as_posix()] = path.read_bytes()

    def add_file(self, repo: str, name: str, data: bytes) -> None:
        self.repos.setdefault(repo, {})[name] = data

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _json(self, status: int, data: object, error: str | None = None) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if error:
                    self.send_header("X-Error-Code", error)
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(raw)

            def _serve(self, body: bool) -> None:
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Range")))
                if path.startswith("/api/models/"):
                    repo = path[len("/api/models/"):].split("/revision/")[0]
                    if repo not in hub.repos:
                        return self._json(404, {"error": "Repository not found"}, "RepoNotFound")
                    return self._json(200, {
                        "id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                        "siblings": [{"rfilename": f} for f in sorted(hub.repos[repo])]})
                parts = path.lstrip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._json(404, {"error": "not found"})
                repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                if repo not in hub.repos:
                    return self._json(404, {"error": "Repository not found"}, "RepoNotFound")
                if name not in hub.repos[repo]:
                    return self._json(404, {"error": "Entry not found"}, "EntryNotFound")
                data = hub.repos[repo][name]
                etag = hashlib.sha256(data).hexdigest()
                if name in hub.corrupt:
                    data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
                start = 0
                ranged = self.headers.get("Range")
                if body and ranged and ranged.startswith("bytes="):
                    start = int(ranged[6:].split("-")[0] or 0)
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if not body:
                    return
                if name in hub.cut_once:
                    hub.cut_once.discard(name)
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data[start:])

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
