"""`lookahead serve`'s flags (the command itself: `serve_cmd.py`, imported only once the
service's extra is known to be installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lookahead.cli.errors import fail, handled
from lookahead.cli.options import (
    BATCH_SIZE,
    CACHE_REUSE,
    CTX_SIZE,
    DRAFT,
    IDLE_TOKENS,
    AliasOption,
    BatchSizeOption,
    BudgetOption,
    CacheReuseOption,
    ChatTemplateFileOption,
    ChatTemplateOption,
    CorsOriginsOption,
    CtxSizeOption,
    FairnessSlackOption,
    FairOption,
    GracePeriodOption,
    IdleTokensOption,
    IndexScopeOption,
    JinjaOption,
    KMaxOption,
    KvUnifiedOption,
    ModelOption,
    ParallelOption,
    ReplicaIdOption,
    ServeExactOption,
    ServeNPredictOption,
    ServeSeedOption,
    ServeTempOption,
    SlotsOption,
    TagsOption,
    ThreadsOption,
)
from lookahead.models import catalog as models


def serve(
    model: ModelOption = models.DEFAULT_MODEL,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="LOOKAHEAD_API_KEY",
            show_envvar=False,
            help="Require 'Authorization: Bearer KEY' on every /v1 call (or set LOOKAHEAD_API_KEY: "
            "a flag's value is visible to every user of the machine in the process list).",
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option("--api-key-file", help="Keys, one per line; each key drafts only from its own requests."),
    ] = None,
    queue: Annotated[int, typer.Option(help="Requests that may wait for the model; more get 429.")] = 16,
    n_ctx: CtxSizeOption = CTX_SIZE,
    threads: ThreadsOption = 0,
    cache_reuse: CacheReuseOption = CACHE_REUSE,
    batch_size: BatchSizeOption = BATCH_SIZE,
    idle_tokens: IdleTokensOption = IDLE_TOKENS,
    no_shared_index: Annotated[
        bool, typer.Option("--no-shared-index", help="Do not draft from earlier requests' prompts and outputs.")
    ] = False,
    index_file: Annotated[
        Path | None, typer.Option("--index-file", help="Keep the shared index in this file across restarts.")
    ] = None,
    index_scope: IndexScopeOption = None,
    metrics_key: Annotated[
        str | None,
        typer.Option(
            "--metrics-key",
            envvar="LOOKAHEAD_METRICS_KEY",
            show_envvar=False,
            help="The key /metrics asks for (default: any API key); or set LOOKAHEAD_METRICS_KEY, "
            "or use --metrics-key-file.",
        ),
    ] = None,
    metrics_key_file: Annotated[
        Path | None,
        typer.Option("--metrics-key-file", help="Read the key /metrics asks for from this file (one line)."),
    ] = None,
    no_spec: Annotated[bool, typer.Option("--no-spec", help="Plain decoding unless a request asks for it.")] = False,
    exact: ServeExactOption = False,
    k_max: KMaxOption = DRAFT.k_max,
    budget: BudgetOption = DRAFT.budget,
    parallel: ParallelOption = -1,
    fair: FairOption = None,
    fairness_slack: FairnessSlackOption = None,
    kv_unified: KvUnifiedOption = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    replica_id: ReplicaIdOption = None,
    grace_period: GracePeriodOption = 25.0,
    alias: AliasOption = None,
    tags: TagsOption = None,
    temp: ServeTempOption = None,
    seed: ServeSeedOption = None,
    n_predict: ServeNPredictOption = None,
    cors_origins: CorsOriginsOption = "localhost",
    slots: SlotsOption = True,
    chat_template: ChatTemplateOption = None,
    chat_template_file: ChatTemplateFileOption = None,
    jinja: JinjaOption = None,
) -> None:
    """Serve an OpenAI-compatible API (/v1/completions, /v1/chat/completions, /v1/models,
    /health, /metrics, and llama-server's routes) that keeps one model warm and drafts from
    what it has seen.

    Example: lookahead serve --port 8000, then
    curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"messages": [{"role": "user", "content": "Hi"}]}'
    """
    from lookahead.cli.extras import require

    require("serve", "serve")  # before anything imports the service's packages
    from lookahead.cli.serve_cmd import read_keys, read_metrics_key, run_serve, serve_draft
    from lookahead.models.chat_template import template_source
    from lookahead.server.request_defaults import from_options

    with handled():
        if log_level not in ("debug", "info", "warning", "error"):
            fail(f"--log-level must be debug, info, warning or error, got {log_level}")
        draft = serve_draft(no_spec, exact, k_max, budget, fair, fairness_slack)
        run_serve(
            model=model,
            host=host,
            port=port,
            keys=read_keys(api_key, api_key_file),
            queue=queue,
            n_ctx=n_ctx,
            threads=threads,
            cache_reuse=cache_reuse,
            batch_size=batch_size,
            idle_tokens=idle_tokens,
            shared_index=not no_shared_index,
            index_file=index_file,
            index_scope=index_scope,
            metrics_key=read_metrics_key(metrics_key, metrics_key_file),
            draft=draft,
            log_level=log_level,
            parallel=parallel,
            kv_unified=kv_unified,
            replica_id=replica_id,
            grace_period=grace_period,
            alias=alias,
            tags=tags,
            defaults=from_options(temp, seed, n_predict),
            cors_origins=cors_origins,
            slots_endpoint=slots,
            chat_template=template_source(chat_template, chat_template_file, jinja),
        )
