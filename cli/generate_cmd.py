"""`lookahead generate`: stream a generation to stdout, statistics to stderr or as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from cli.models_cmd import _RichProgress
from lookahead.api import EXACT_MIN_CTX, check_prompt_fits, load
from lookahead.backend.llama import BackendConfig
from lookahead.drafting import DraftConfig
from lookahead.engine import Done, Result, Step
from lookahead.errors import ConfigError, UserError
from lookahead.index.corpus import CorpusError
from lookahead.models import check_gguf, default_cache_dir, resolve_model
from lookahead.sampling import SamplingConfig


def json_summary(result: Result) -> dict[str, Any]:
    """The --json object. Its keys are a contract other tools rely on: add, never rename."""
    s = result.stats
    return {
        "text": result.text,
        "n_tokens": s.n_tokens,
        "prefill_s": round(s.prefill_s, 6),
        "decode_s": round(s.decode_s, 6),
        "steps": s.steps,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "alpha": round(s.alpha, 6),
        "finish_reason": result.finish_reason,
        "k_trace": s.k_trace,
        "context_full": result.context_full,
    }


def run_generate(
    *,
    text: str,
    chat: bool,
    model: str,
    max_tokens: int,
    sampling: dict[str, Any],
    stop: tuple[str, ...],
    draft: dict[str, Any],
    as_json: bool,
    n_ctx: int,
    threads: int,
) -> None:
    # Check everything that can be checked before the model loads (seconds to minutes on a
    # big model): every config, the corpus folders, the prompt's length in tokens.
    sampling_cfg = SamplingConfig(**sampling)
    draft_cfg = DraftConfig(**draft)
    if max_tokens <= 0:
        raise ConfigError(f"--max-tokens must be > 0, got {max_tokens}")
    if n_ctx < 0:  # llama.cpp takes an unsigned int: -1 would wrap to 4 billion tokens
        raise ConfigError(f"--n-ctx must be >= 0 (0 = the model's own), got {n_ctx}")
    if threads < 0:
        raise ConfigError(f"--threads must be >= 0 (0 = all available), got {threads}")
    if not text.strip():
        raise UserError("the prompt is empty")
    if draft_cfg.enabled and draft_cfg.exact and 0 < n_ctx < EXACT_MIN_CTX:
        raise ConfigError(
            f"--exact runs a self-test that needs --n-ctx of at least {EXACT_MIN_CTX}, got {n_ctx}"
        )
    for folder in draft_cfg.corpora:
        if not Path(folder).exists():
            raise CorpusError(f"corpus folder not found: {folder}")
    backend_cfg = BackendConfig(n_ctx=n_ctx, n_threads=threads)
    err = Console(stderr=True)
    with _RichProgress(err) as progress:
        path = resolve_model(model, default_cache_dir(), progress)
        check_gguf(path)
        check_prompt_fits(path, text, chat, n_ctx)
        lm = load(model, backend=backend_cfg, progress=progress)
    if lm.verdict is not None and not lm.verdict.is_default:
        failed = "; ".join(f"{t.candidate}: {t.detail}" for t in lm.verdict.trials if not t.ok)
        err.print(f"[dim]backend: {lm.verdict.candidate.description} ({failed})[/dim]", highlight=False)
    # One-time measurements (cached per model and machine; ~15 s on a 2-core CPU the first
    # time): shown, not a silent pause before the first token.
    if draft_cfg.enabled and draft_cfg.adaptive:
        with err.status("measuring the verify cost on this machine (cached after the first run)"):
            lm.calibrate()
    if draft_cfg.enabled and draft_cfg.exact:
        with err.status("testing which batch sizes give bit-identical logits"):
            lm.exact_limits()
    result: Result | None = None
    for event in lm.stream(
        text, chat=chat, max_tokens=max_tokens, stop=stop, sampling=sampling_cfg, draft=draft_cfg
    ):
        if isinstance(event, Step):
            if not as_json and event.text:
                sys.stdout.write(event.text)
                sys.stdout.flush()
        elif isinstance(event, Done):
            result = event.result
    assert result is not None
    if as_json:
        sys.stdout.write(json.dumps(json_summary(result), ensure_ascii=False) + "\n")
    else:
        sys.stdout.write("\n")
        s = result.stats
        err.print(
            f"[dim]{s.n_tokens} tokens in {s.decode_s:.2f}s ({s.tokens_per_s:.1f} tok/s), "
            f"{s.steps} steps, alpha {s.alpha:.2f}, prefill {s.prefill_s:.2f}s[/dim]",
            highlight=False,
        )
        if result.context_full:
            err.print(f"stopped: the context of {lm.backend.n_ctx} tokens is full; raise --n-ctx", highlight=False)
