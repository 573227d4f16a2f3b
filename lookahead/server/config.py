"""How the service runs: one frozen configuration, built once at the edge (`lookahead serve`, tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lookahead.core.draft_state import DraftConfig
from lookahead.errors import ConfigError
from lookahead.server.request_defaults import RequestDefaults


@dataclass(frozen=True)
class ServeConfig:
    """How the service runs. Built once at the edge (`lookahead serve`, tests)."""

    model_id: str  # the name clients see in /v1/models and may send as `model`
    aliases: tuple[str, ...] = ()  # every name given with --alias (model_id is one of them)
    tags: tuple[str, ...] = ()  # --tags, listed in /v1/models
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    max_queue: int = 16  # requests waiting beyond the running one; then 429
    shared_index: bool = True  # draft from earlier requests with the same key (see index_scope)
    # whose earlier requests a request drafts from: "key" = the same API key's, "none" = no
    # memory across requests. None: "key" when keys are configured, else "none", since
    # without keys every client would share one memory, and a response's accepted count
    # would tell one client what another recently sent.
    index_scope: str | None = None
    index_file: Path | None = None  # persist the shared index here
    index_max_tokens: int = 65536  # per key
    index_max_requests: int = 256  # per key
    max_body_bytes: int = 8 << 20  # larger request bodies get 413
    draft: DraftConfig = field(default_factory=DraftConfig)  # per-request defaults
    shutdown_timeout: float = 10.0  # seconds the running request gets to finish on shutdown
    calibrate: bool = True  # measure the verify cost at start, not on the first request
    # requests decoded together in one batch per step; 1 = one at a time (the serial
    # worker), 0 = what pays on this machine (`lookahead.core.multi.default_parallel`)
    parallel: int = 1
    # with parallel > 1: one KV cache for every request (tree drafts), or (the default) one
    # stream per request (chain drafts; a request's output then does not depend on its
    # neighbours on a batch-invariant model, see lookahead.backend.slots and docs/design.md)
    kv_unified: bool = False
    metrics_key: str | None = None  # the key /metrics asks for; None: any API key (open when there is none)
    replica_id: str = ""  # X-Lookahead-Replica and /metrics; empty: the host's name
    defaults: RequestDefaults = field(default_factory=RequestDefaults)  # for fields a request leaves out
    # origins a browser page may call from: "localhost" = pages on this machine (the
    # default), "*" = any (echoed back, never with credentials), else the exact origins
    # listed; a POST from any other page is a 403 (`compat.Cors`)
    cors_origins: tuple[str, ...] = ("localhost",)
    # seconds a token stream may stay silent (queued, reading its prompt) before it sends an
    # SSE comment, so that proxies' idle timeouts do not cut it; 0: never
    stream_ping: float = 15.0
    slots_endpoint: bool = True  # GET /slots (off: 501, as llama-server with --no-slots)
    # the chat template's Jinja source (--chat-template, resolved at the edge); None: the model's own
    chat_template: str | None = None
    # a fill-in-the-middle prompt's share for the code around the cursor (3/4 before it, 1/4
    # after), as llama-server's logical batch (-b) sizes it; the rest of the context holds
    # `input_extra` chunks. llama.cpp's default is 2048; `lookahead serve` uses 1024
    fim_batch: int = 2048
    # after a fill-in-the-middle answer that a limit ended: tokens to write while idle for the
    # request that assumes it accepted (`idle.py`); 0 = no idle work
    idle_tokens: int = 64

    def __post_init__(self) -> None:
        if self.index_scope not in (None, "key", "none"):
            raise ConfigError(f"index_scope must be 'key' or 'none', got {self.index_scope!r}")

    @property
    def remembers(self) -> bool:
        """Whether requests draft from earlier requests (of the same key)."""
        scope = self.index_scope or ("key" if self.api_keys else "none")
        return self.shared_index and scope == "key"
