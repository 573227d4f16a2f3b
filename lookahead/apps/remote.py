"""`lookahead complete --server URL`: the completion written by a running `lookahead serve`
(or any server with llama.cpp's `/infill`), so an editor command or a shell loop pays no
model load, probe or calibration per call.

The request is the one an editor sends: the code before the cursor (less the blank
indentation the cursor sits on, which the model writes itself, as `complete` does) and the
code after it, to `/infill`; to `/completion` with the code before the cursor alone when
asked for no fill-in-the-middle (`--no-fim`) or when the served model has no FIM tokens.
The answer streams back as the same events a local generation yields, so `complete` stops
at the end of the cursor's block, prints and writes it the same way.

A server that cannot be reached, or is still loading, is `ServerUnavailable`: `complete`
then loads the model itself. Any other refusal is the server's message, as a UserError.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from lookahead.apps.complete import CompletionPrompt, Split, blank_indent
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Event, Result, Stats, Step
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import UserError

ENV_SERVER = "LOOKAHEAD_SERVER"  # the server's URL, where --server is not given
ENV_API_KEY = "LOOKAHEAD_API_KEY"  # sent as a Bearer token when set
HEALTH_TIMEOUT_S = 3.0  # a server whose /health does not answer this soon is taken as absent
READ_TIMEOUT_S = 600.0  # the longest wait for the next piece of a completion


class ServerUnavailable(Exception):
    """The server cannot be reached or is not ready: complete locally instead."""


def remote_prompt(split: Split, fim: bool) -> CompletionPrompt:
    """What the server is sent of the cursor's place (no tokens: the server tokenizes)."""
    return CompletionPrompt([], fim, [], 0, blank_indent(split.prefix))


def request_body(
    split: Split,
    prompt: CompletionPrompt,
    *,
    max_tokens: int,
    sampling: SamplingConfig,
    stop: tuple[str, ...],
    draft: DraftConfig,
) -> dict[str, Any]:
    """The `/infill` body (`/completion`'s when not `prompt.fim`), with `complete`'s sampling."""
    before = split.prefix[: len(split.prefix) - len(prompt.healed)]
    body: dict[str, Any] = {
        "n_predict": max_tokens,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "repeat_penalty": sampling.repeat_penalty,
        "repeat_last_n": sampling.repeat_last_n,
        "seed": -1 if sampling.seed is None else sampling.seed,
        "stop": list(stop),
        "stream": True,
        "return_tokens": True,
        "lookahead": {"enabled": draft.enabled, "exact": draft.exact},
    }
    if prompt.fim:
        return {"input_prefix": before, "input_suffix": split.suffix, "prompt": "", **body}
    return {"prompt": before, **body}


def remote_events(
    url: str,
    split: Split,
    prompt: CompletionPrompt,
    *,
    max_tokens: int,
    sampling: SamplingConfig,
    stop: tuple[str, ...] = (),
    draft: DraftConfig | None = None,
    api_key: str | None = None,
) -> tuple[CompletionPrompt, Iterator[Event]]:
    """Open the request; (the prompt as sent, the events of its answer). Raises
    ServerUnavailable before anything is generated when the server is not there; a model
    without FIM tokens is asked again without the suffix."""
    draft = draft or DraftConfig()
    check_health(url)
    body = request_body(split, prompt, max_tokens=max_tokens, sampling=sampling, stop=stop, draft=draft)
    try:
        response = _open(url, "/infill" if prompt.fim else "/completion", body, api_key)
    except _Refused as exc:
        if not (prompt.fim and exc.code == "fim_not_supported"):
            raise UserError(f"the server at {url} refused the completion: {exc.message}") from None
        prompt = CompletionPrompt([], False, [], 0, prompt.healed)
        body = request_body(split, prompt, max_tokens=max_tokens, sampling=sampling, stop=stop, draft=draft)
        try:
            response = _open(url, "/completion", body, api_key)
        except _Refused as again:
            raise UserError(f"the server at {url} refused the completion: {again.message}") from None
    return prompt, _events(response)


def check_health(url: str) -> None:
    """ServerUnavailable unless the server answers `/health` with 200 soon."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=HEALTH_TIMEOUT_S) as r:
            r.read()
    except urllib.error.HTTPError as exc:
        raise ServerUnavailable(f"{url} is not ready (HTTP {exc.code} on /health)") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServerUnavailable(f"cannot reach {url} ({getattr(exc, 'reason', exc)})") from None


class _Refused(Exception):
    def __init__(self, message: str, code: str | None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _open(url: str, path: str, body: dict[str, Any], api_key: str | None) -> Any:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + path, json.dumps(body).encode(), headers, method="POST")
    try:
        return urllib.request.urlopen(req, timeout=READ_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code in (502, 503, 504):
            raise ServerUnavailable(f"{url} answered {exc.code} (still loading, or shutting down)") from None
        error = _error_of(exc.read())
        if exc.code == 404:
            raise UserError(f"{url} has no {path} route: is it lookahead serve or llama-server?") from None
        raise _Refused(error.get("message") or f"HTTP {exc.code}", error.get("code")) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnavailable(f"cannot reach {url} ({reason})") from None


def _error_of(raw: bytes) -> dict[str, Any]:
    try:
        error = json.loads(raw).get("error", {})
    except (ValueError, AttributeError):
        return {}
    return error if isinstance(error, dict) else {}


def _events(response: Any) -> Iterator[Event]:
    """The server's `data: {...}` lines as a generation's Steps and its Done. The response
    is closed when the generator is (a completion cut short ends the server's work too)."""
    text = ""
    tokens: list[int] = []
    steps = 0
    with response:
        for raw in response:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: "):
                continue
            data = json.loads(line[len("data: ") :])
            if "error" in data:
                raise UserError(f"the server failed: {data['error'].get('message', data['error'])}")
            if not data.get("stop"):
                steps += 1
                text += data.get("content", "")
                tokens += data.get("tokens", [])
                yield Step(list(data.get("tokens", [])), data.get("content", ""), 0, 0, 0, 0.0, 0.0, 0.0)
                continue
            t = data.get("timings", {})
            stats = Stats(
                n_tokens=int(data.get("tokens_predicted", len(tokens))),
                steps=steps,
                drafted=int(t.get("draft_n", 0)),
                accepted=int(t.get("draft_n_accepted", 0)),
                prefill_s=float(t.get("prompt_ms", 0.0)) / 1e3,
                decode_s=float(t.get("predicted_ms", 0.0)) / 1e3,
            )
            finish = "length" if data.get("stop_type") == "limit" else "stop"
            yield Done(Result(text, tokens, stats, finish, bool(data.get("truncated"))))
            return
    raise UserError("the server ended the answer before its last message")
