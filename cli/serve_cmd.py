"""`lookahead serve`: the OpenAI-compatible service on uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
from pathlib import Path

from rich.console import Console

from lookahead.backend.llama import BackendConfig
from lookahead.backend.slots import MAX_SEQ
from lookahead.cli.listen import bind_all, split_hosts
from lookahead.cli.models_cmd import _RichProgress
from lookahead.core.allocate import DEFAULT_SLACK
from lookahead.core.draft_state import DraftConfig
from lookahead.errors import ConfigError, UserError
from lookahead.models.catalog import default_cache_dir
from lookahead.server.drain import check_replica, draining_server
from lookahead.server.request_defaults import RequestDefaults

MAX_SLOTS = MAX_SEQ // 2


def read_keys(api_key: str | None, api_key_file: Path | None) -> tuple[str, ...]:
    """Keys from --api-key and from --api-key-file (one per line; blank lines and # comments skipped)."""
    keys = [api_key.strip()] if api_key and api_key.strip() else []
    if api_key is not None and not api_key.strip():
        raise ConfigError("--api-key is empty")
    if api_key_file is not None:
        try:
            # utf-8-sig: a key file saved by an editor that writes a BOM keeps its first key intact
            lines = api_key_file.read_text(encoding="utf-8-sig").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read --api-key-file {api_key_file}: {exc}") from exc
        found = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
        if not found:
            raise UserError(f"--api-key-file {api_key_file} holds no key")
        keys.extend(found)
    return tuple(dict.fromkeys(keys))


def read_metrics_key(metrics_key: str | None, metrics_key_file: Path | None) -> str | None:
    """The key /metrics asks for: from --metrics-key (or LOOKAHEAD_METRICS_KEY), or from the one
    line of --metrics-key-file, which keeps it out of the process list."""
    if metrics_key_file is None:
        return metrics_key
    if metrics_key is not None:
        raise ConfigError("--metrics-key and --metrics-key-file each set the metrics key: give one")
    try:
        lines = metrics_key_file.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read --metrics-key-file {metrics_key_file}: {exc}") from exc
    found = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    if len(found) != 1:
        raise UserError(f"--metrics-key-file {metrics_key_file} must hold one key, found {len(found)}")
    return found[0]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """Fail with one line, before the model loads, when the address cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(f"cannot resolve --host {host}: {exc}") from exc
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def check_parallel(parallel: int, exact: bool) -> int:
    """The --parallel to run: 0 = decided from the cost curve at start (given as -1, as in
    llama.cpp, or as 0, the older spelling), except that --exact's bit-identity holds for
    one request at a time only, so it means 1."""
    if not -1 <= parallel <= MAX_SLOTS:
        raise ConfigError(f"--parallel must be -1 (what pays on this CPU) or 1..{MAX_SLOTS}, got {parallel}")
    if exact and parallel > 1:
        raise ConfigError("--exact is bit-identical only for one request at a time: use --parallel 1 (or -1)")
    return 1 if exact else max(parallel, 0)


def serve_draft(
    no_spec: bool, exact: bool, k_max: int, budget: int, fair: bool | None, slack: float | None
) -> DraftConfig:
    """The service's drafting defaults from its flags; the promise to batched requests is
    --fair (slack 0), --batch-total (None) or --fairness-slack (default 0.1), one of them."""
    if fair is not None and slack is not None:
        flag = "--fair" if fair else "--batch-total"
        raise ConfigError(f"{flag} and --fairness-slack each set the promise to batched requests: give one")
    if fair is not None:
        slack = 0.0 if fair else None
    elif slack is None:
        slack = DEFAULT_SLACK
    elif not 0.0 <= slack < 1.0:
        raise ConfigError(f"--fairness-slack must be in [0, 1), got {slack}")
    return DraftConfig(enabled=not no_spec, exact=exact, k_max=k_max, budget=budget, fairness_slack=slack)


def parse_origins(text: str) -> tuple[str, ...]:
    """--cors-origins as a tuple: `*`, `localhost` or exact origins (`scheme://host[:port]`)."""
    origins = tuple(o.strip().rstrip("/") for o in text.split(",") if o.strip())
    if not origins:
        raise ConfigError("--cors-origins is empty (use '*' for any origin)")
    for origin in origins:
        if origin not in ("*", "localhost") and "://" not in origin:
            raise ConfigError(
                f"--cors-origins: {origin!r} is not an origin (write it as scheme://host[:port], "
                "or '*', or 'localhost')"
            )
    return origins


def run_serve(
    *,
    model: str,
    host: str,
    port: int,
    keys: tuple[str, ...],
    queue: int,
    n_ctx: int,
    threads: int,
    shared_index: bool,
    index_file: Path | None,
    draft: DraftConfig,
    log_level: str,
    parallel: int = -1,
    kv_unified: bool = False,
    index_scope: str | None = None,
    metrics_key: str | None = None,
    replica_id: str | None = None,
    grace_period: float = 25.0,
    alias: str | None = None,
    tags: str | None = None,
    defaults: RequestDefaults | None = None,
    cors_origins: str = "localhost",
    slots_endpoint: bool = True,
    chat_template: str | None = None,
    cache_reuse: int = 0,
    batch_size: int = 2048,
    idle_tokens: int = 64,
) -> int:
    import uvicorn

    from lookahead.api import load, locate
    from lookahead.server import ServeConfig, create_app

    if log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"--log-level must be debug, info, warning or error, got {log_level}")
    if not 1 <= port <= 65535:
        raise ConfigError(f"--port must be in 1..65535, got {port}")
    if queue < 0:
        raise ConfigError(f"--queue must be >= 0, got {queue}")
    if n_ctx < 0:
        raise ConfigError(f"--ctx-size must be >= 0 (0 = the model's own), got {n_ctx}")
    if threads < 0:
        raise ConfigError(f"--threads must be >= 0 (0 = all available), got {threads}")
    if batch_size < 64:
        raise ConfigError(f"--batch-size must be >= 64, got {batch_size}")
    if idle_tokens < 0:
        raise ConfigError(f"--idle-tokens must be >= 0 (0 = off), got {idle_tokens}")
    if cache_reuse < 0:
        raise ConfigError(f"--cache-reuse must be >= 0 (0 = off), got {cache_reuse}")
    if index_scope not in (None, "key", "none"):
        raise ConfigError(f"--index-scope must be 'key' or 'none', got {index_scope}")
    if metrics_key is not None and not metrics_key.strip():
        raise ConfigError("--metrics-key is empty")
    parallel = check_parallel(parallel, draft.exact)
    origins = parse_origins(cors_origins)
    aliases = sorted({a.strip() for a in (alias or "").split(",") if a.strip()})
    if alias is not None and not aliases:
        raise ConfigError("--alias is empty")
    replica_id = check_replica(replica_id, grace_period)
    err = Console(stderr=True)
    hosts = split_hosts(host)
    sockets = bind_all(hosts, port) if len(hosts) > 1 else None  # uvicorn binds one host itself
    if sockets is None:
        check_port(host, port)
    if not keys and not all(is_loopback(h.strip("[]")) for h in hosts):
        err.print(
            f"[yellow]warning:[/yellow] listening on {host} without an API key: anyone who can reach "
            "this address can use the model (set --api-key or --api-key-file)",
            highlight=False,
        )
    config = ServeConfig(
        model_id=aliases[0] if aliases else model,  # as llama-server: the first in sorted order
        aliases=tuple(aliases),
        tags=tuple(sorted({t.strip() for t in (tags or "").split(",") if t.strip()})),
        api_keys=keys,
        max_queue=queue,
        shared_index=shared_index,
        index_file=index_file,
        index_scope=index_scope,
        metrics_key=metrics_key.strip() if metrics_key else None,
        draft=draft,
        parallel=parallel,
        kv_unified=kv_unified,
        replica_id=replica_id,
        defaults=defaults or RequestDefaults(),
        cors_origins=origins,
        slots_endpoint=slots_endpoint,
        chat_template=chat_template,
        fim_batch=batch_size,
        idle_tokens=idle_tokens,
    )
    if index_file is not None and not config.remembers:
        err.print(
            "[yellow]warning:[/yellow] --index-file is unused: this server keeps no memory across requests "
            "(without API keys, ask for one with --index-scope key)",
            highlight=False,
        )
    with _RichProgress(err) as progress:
        path = locate(model, default_cache_dir(), progress)
    backend = BackendConfig(n_ctx=n_ctx, n_threads=threads, cache_reuse=cache_reuse)
    app = create_app(config, lambda: load(path, backend=backend, path=path))
    server = draining_server(
        uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=10), app, grace_period
    )
    failed: list[str] = []

    def fatal(message: str) -> None:
        failed.append(message)
        server.should_exit = True

    app.state.service.on_fatal = fatal
    urls = ", ".join(f"http://{h if ':' not in h or h.startswith('[') else f'[{h}]'}:{port}/v1" for h in hosts)
    err.print(f"lookahead serving {model} on {urls} (loading the model...)", highlight=False)
    logging.getLogger("lookahead.server").setLevel(log_level.upper())
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for the
    # handler that was there before it: make that one a no-op, so a clean shutdown exits 0
    # instead of dying by the signal it just handled.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    server.run(sockets=sockets)
    if failed:
        raise UserError(f"could not load the model: {failed[0]}")
    return 0
