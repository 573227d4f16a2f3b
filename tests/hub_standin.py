"""A stand-in for the Hugging Face hub on 127.0.0.1, for tests (the test machines cannot reach
the real one). `huggingface_hub` is pointed at it with `HF_ENDPOINT`.

It answers the two calls a GGUF download makes, as the hub does:
- `GET /api/models/OWNER/NAME[/revision/REV]?blobs=True`: the repository listing, with each
  file's size and LFS sha256;
- `HEAD` / `GET /OWNER/NAME/resolve/REV/FILE`: the file, with `X-Repo-Commit`, `ETag`,
  `X-Linked-Etag` (the LFS sha256), `X-Linked-Size`, and `Range: bytes=N-` answered with 206.
Unknown repositories and files get 404 with the hub's `X-Error-Code`. A private repository
needs `Authorization: Bearer TOKEN`. Every request is recorded, so tests can see what was
asked (a resumed download sends a Range).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def tiny_gguf(n_floats: int = 65536, seed: int = 0) -> bytes:
    """A structurally complete GGUF (one f32 tensor of `n_floats`, random values), a few hundred KB."""
    name = b"w.weight"
    kv_key = b"general.architecture"
    kv = struct.pack("<Q", len(kv_key)) + kv_key + struct.pack("<I", 8) + struct.pack("<Q", 5) + b"llama"
    tensor = struct.pack("<Q", len(name)) + name + struct.pack("<IQ", 1, n_floats) + struct.pack("<IQ", 0, 0)
    head = struct.pack("<4sIQQ", b"GGUF", 3, 1, 1) + kv + tensor
    head += b"\0" * (-len(head) % 32)
    rng = random.Random(seed)
    return head + rng.randbytes(4 * n_floats)


@dataclass
class Repo:
    files: dict[str, bytes]
    token: str | None = None  # private: this bearer token is needed
    served: dict[str, bytes] = field(default_factory=dict)  # bytes sent instead of `files` (a damaged upload)
    drops: int = 0  # this many downloads lose the connection halfway through the body


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # method, path, headers
    url: str = ""

    def gets(self, filename: str) -> list[dict[str, str]]:
        """Headers of every GET of `filename`'s bytes."""
        return [h for m, p, h in self.requests if m == "GET" and "/resolve/" in p and p.endswith("/" + filename)]


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _error(self, status: int, code: str, message: str) -> None:
            data = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(data)

        def _repo(self, name: str) -> Repo | None:
            repo = hub.repos.get(name)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return None
            if repo.token is not None and self.headers.get("Authorization") != f"Bearer {repo.token}":
                self._error(401, "RepoNotFound", "Invalid credentials in Authorization header")
                return None
            return repo

        def _answer(self, body: bool) -> None:
            hub.requests.append((self.command, self.path, dict(self.headers)))
            path = self.path.split("?", 1)[0]
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?", path):
                repo = self._repo(m.group(1))
                if repo is not None:
                    self._listing(m.group(1), repo, body)
                return
            if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                repo = self._repo(m.group(1))
                if repo is None:
                    return
                data = repo.files.get(m.group(3))
                if data is None:
                    self._error(404, "EntryNotFound", "Entry not found")
                    return
                drop = body and repo.drops > 0
                if drop:
                    repo.drops -= 1
                self._file(data, repo.served.get(m.group(3), data), body, drop)
                return
            self._error(404, "RepoNotFound", "Not found")

        def _listing(self, name: str, repo: Repo, body: bool) -> None:
            siblings = [
                {
                    "rfilename": f,
                    "size": len(data),
                    "blobId": hashlib.sha1(data).hexdigest(),
                    "lfs": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134},
                }
                for f, data in repo.files.items()
            ]
            data = json.dumps(
                {"id": name, "modelId": name, "sha": COMMIT, "private": repo.token is not None, "siblings": siblings}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _file(self, data: bytes, sent: bytes, body: bool, drop: bool = False) -> None:
            sha = hashlib.sha256(data).hexdigest()
            start = 0
            if m := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", "")):
                start = int(m.group(1))
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{sha}"')
            self.send_header("X-Linked-Etag", f'"{sha}"')
            self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(data) - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if drop:  # half the promised bytes, then the connection goes away
                self.wfile.write(sent[start : start + (len(data) - start) // 2])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
            elif body:
                self.wfile.write(sent[start:])

    return Handler


@contextmanager
def serve(hub: Hub) -> Iterator[Hub]:
    """Run `hub` on a free loopback port (its `url` set) until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


def hub_env(hub_url: str, hf_cache: str, xdg_cache: str, **extra: str) -> dict[str, str]:
    """The environment of a `lookahead` subprocess that talks to the stand-in only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(
        HF_ENDPOINT=hub_url,
        HF_HOME=os.path.join(xdg_cache, "huggingface"),  # no token file of the machine's user
        HF_HUB_CACHE=hf_cache,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        XDG_CACHE_HOME=xdg_cache,
        NO_PROXY="127.0.0.1,localhost",
        **extra,
    )
    return env
