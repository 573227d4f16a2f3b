"""llama.cpp's own server as a peer: its n-gram speculative decoding on the same prompts.

Given a `llama-server` binary (`lookahead bench --llama-server PATH`), each run starts a
fresh server (no prompt cache, no n-gram state carried from the previous prompt), sends the
prompt's token ids to `/completion` once, greedy, and reads the server's own `timings`
(prompt and generation milliseconds, drafted and accepted tokens), then stops it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from bench.measurement import Measurement

# method name -> the server's --spec-type (None: no speculative decoding, its own baseline)
SERVER_METHODS: dict[str, str | None] = {
    "server_plain": None,
    "server_ngram_simple": "ngram-simple",
    "server_ngram_mod": "ngram-mod",
}


def server_command(
    binary: Path, model: Path, port: int, threads: int, n_ctx: int, spec_type: str | None
) -> list[str]:
    """The command line of one fresh server: one slot, loopback only, the given --spec-type."""
    cmd = [
        str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", str(n_ctx), "--threads", str(threads), "--threads-batch", str(threads),
        "--parallel", "1",
    ]  # fmt: skip
    if spec_type is not None:
        cmd += ["--spec-type", spec_type]
    return cmd


def completion_request(prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """The /completion body: the prompt as token ids (the same ids lookahead decodes), greedy."""
    return {
        "prompt": prompt,
        "n_predict": max_tokens,
        "temperature": 0.0,
        "top_k": 1,
        "repeat_penalty": 1.0,
        "cache_prompt": False,
        "return_tokens": True,
        "stream": False,
    }


def parse_completion(body: dict[str, Any]) -> Measurement:
    """A Measurement from the server's reply: its `tokens` and its own `timings`.

    Generation time is the server's `predicted_ms` over `predicted_n` tokens; each verify
    step emits its accepted drafts plus one token, so steps = predicted_n - draft_n_accepted.
    """
    timings = body.get("timings")
    if not isinstance(timings, dict) or "predicted_n" not in timings or "predicted_ms" not in timings:
        raise ValueError(f"the server's reply has no usable timings: {sorted(body)}")
    n = int(timings["predicted_n"])
    drafted = int(timings.get("draft_n") or 0)
    accepted = int(timings.get("draft_n_accepted") or 0)
    tokens = [int(t) for t in body.get("tokens") or []]
    return Measurement(
        tokens=tokens,
        decode_tokens=n,
        decode_s=float(timings["predicted_ms"]) / 1000,
        prefill_s=float(timings.get("prompt_ms") or 0.0) / 1000,
        steps=max(n - accepted, 0),
        drafted=drafted,
        accepted=accepted,
        extra={"timings": timings, "stop_type": body.get("stop_type")},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 600) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


class LlamaServerMethods:
    """Runs prompts on fresh llama-server processes."""

    def __init__(self, binary: Path, model: Path, threads: int, n_ctx: int = 4096, start_timeout: float = 120) -> None:
        self.binary, self.model, self.threads, self.n_ctx = binary, model, threads, n_ctx
        self.start_timeout = start_timeout

    def run(self, prompt: list[int], max_tokens: int, spec_type: str | None) -> Measurement:
        port = _free_port()
        cmd = server_command(self.binary, self.model, port, self.threads, self.n_ctx, spec_type)
        # its log goes to a file: a pipe nobody reads would fill up and stall the server
        with tempfile.TemporaryFile(mode="w+") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
            base = f"http://127.0.0.1:{port}"
            try:
                self._wait_ready(proc, base, log)
                t0 = time.perf_counter()
                body = _http(f"{base}/completion", completion_request(prompt, max_tokens))
                m = parse_completion(body)
                m.extra["wall_s"] = time.perf_counter() - t0
                m.extra["command"] = cmd
                return m
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def _wait_ready(self, proc: subprocess.Popen[str], base: str, log: IO[str]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                err = log.read()[-2000:]
                raise RuntimeError(f"llama-server exited with {proc.returncode}: {err}")
            try:
                if _http(f"{base}/health", timeout=2).get("status") == "ok":
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.25)
        raise RuntimeError(f"llama-server did not answer /health within {self.start_timeout:.0f} s")
