"""`lookahead generate`: stream a generation to stdout, statistics to stderr or as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from lookahead.api import Model, check_prompt_fits, load, locate
from lookahead.backend.llama import BackendConfig
from lookahead.cli.compare import compare_json, compare_line, final, plain_config
from lookahead.cli.live import LiveInfo, show, summary_line
from lookahead.cli.models_cmd import _RichProgress
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Result
from lookahead.core.sampling import SamplingConfig
from lookahead.errors import ConfigError, UserError
from lookahead.index.corpus import CorpusError
from lookahead.models.catalog import default_cache_dir
from lookahead.tuning.exact import EXACT_MIN_CTX


def read_prompt(prompt: str | None, prompt_file: Path | None) -> str:
    """The prompt: the argument, the file's text, or stdin when it is not a terminal."""
    if prompt is not None and prompt_file is not None:
        raise UserError("give the prompt as an argument or with --prompt-file, not both")
    if prompt_file is not None:
        try:
            text = prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read prompt file {prompt_file}: {exc}") from exc
        if not text.strip():
            raise UserError(f"prompt file {prompt_file} is empty")
        return text
    if prompt is not None:
        return prompt
    if not sys.stdin.isatty():
        return sys.stdin.read()
    raise UserError("no prompt: give PROMPT, --prompt-file FILE, or pipe text on stdin")


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
    live: bool = False,
    compare: bool = False,
) -> None:
    # Check everything that can be checked before the model loads (seconds to minutes on a
    # big model): every config, the corpus folders, the prompt's length in tokens.
    sampling_cfg = SamplingConfig(**sampling)
    draft_cfg = DraftConfig(**draft)
    check_options(max_tokens=max_tokens, n_ctx=n_ctx, threads=threads, draft=draft_cfg)
    if not text.strip():
        raise UserError("the prompt is empty")
    if compare and not draft_cfg.enabled:
        raise ConfigError("--compare measures drafts against plain decoding: drop --no-spec")
    err = Console(stderr=True)
    lm, _ = open_model(
        model, n_ctx=n_ctx, threads=threads, draft=draft_cfg, live=live, err=err,
        check=lambda path: check_prompt_fits(path, text, chat, n_ctx),
    )  # fmt: skip
    events = lm.stream(text, chat=chat, max_tokens=max_tokens, stop=stop, sampling=sampling_cfg, draft=draft_cfg)
    result = show(events, echo=not as_json, live=live_info(lm, draft_cfg, live, as_json), err=err)
    extra: dict[str, Any] = {}
    if compare:
        with err.status("decoding again without drafts, to compare"):
            plain = final(
                lm.stream(
                    text, chat=chat, max_tokens=max_tokens, stop=stop, sampling=sampling_cfg,
                    draft=plain_config(draft_cfg),
                )
            )  # fmt: skip
        extra["compare"] = compare_json(result, plain)
    print_result(result, as_json, err, n_ctx=lm.backend.n_ctx, **extra)
    if compare and not as_json:
        line = compare_line(result, plain, greedy=sampling_cfg.greedy, exact=draft_cfg.exact)
        err.print(line, highlight=False, soft_wrap=True)  # one line, for logs too
    gov = lm.tuning.governor
    if gov is not None and gov.switches and not as_json:
        err.print(
            f"busy machine: the thread count changed {gov.switches} time(s), "
            f"ending at {lm.backend.n_threads} of {gov.max_threads} (set --threads to pin it)",
            highlight=False,
        )


def check_options(*, max_tokens: int | None, n_ctx: int, threads: int, draft: DraftConfig) -> None:
    """The checks every generating command makes before loading (None: no --max-tokens)."""
    if max_tokens is not None and max_tokens <= 0:
        raise ConfigError(f"--max-tokens must be > 0, got {max_tokens}")
    if n_ctx < 0:  # llama.cpp takes an unsigned int: -1 would wrap to 4 billion tokens
        raise ConfigError(f"--ctx-size must be >= 0 (0 = the model's own), got {n_ctx}")
    if threads < 0:
        raise ConfigError(f"--threads must be >= 0 (0 = all available), got {threads}")
    if draft.enabled and draft.exact and 0 < n_ctx < EXACT_MIN_CTX:
        raise ConfigError(
            f"--exact runs a self-test that needs --ctx-size of at least {EXACT_MIN_CTX}, got {n_ctx}"
        )
    for folder in draft.corpora:
        if not Path(folder).exists():
            raise CorpusError(f"corpus folder not found: {folder}")


T = TypeVar("T")


def open_model(
    model: str,
    *,
    n_ctx: int,
    threads: int,
    draft: DraftConfig,
    live: bool,
    err: Console,
    check: Callable[[Path], T],
) -> tuple[Model, T]:
    """Find the model (pulling a named one), check its file, run `check(path)` on it before
    the weights load (the prompt's length), load it, and make the one-time measurements the
    drafts need (and the live view: plain decoding's speed). Returns the model and what
    `check` returned."""
    backend_cfg = BackendConfig(n_ctx=n_ctx, n_threads=threads)
    with _RichProgress(err) as progress:
        path = locate(model, default_cache_dir(), progress)
        checked = check(path)
        lm = load(model, backend=backend_cfg, progress=progress, path=path)
    if lm.verdict is not None and not lm.verdict.is_default:
        failed = "; ".join(f"{t.candidate}: {t.detail}" for t in lm.verdict.trials if not t.ok)
        err.print(f"[dim]backend: {lm.verdict.candidate.description} ({failed})[/dim]", highlight=False)
    # One-time measurements (cached per model and machine; ~15 s on a 2-core CPU the first
    # time): shown, not a silent pause before the first token.
    if draft.enabled and (draft.adaptive or (live and sys.stdout.isatty())):
        with err.status("measuring the verify cost on this machine (cached after the first run)"):
            lm.tuning.calibrate()
    if draft.enabled and draft.exact:
        with err.status("testing which batch sizes give bit-identical logits"):
            lm.tuning.exact_limits()
    return lm, checked


def live_info(lm: Model, draft: DraftConfig, live: bool, as_json: bool) -> LiveInfo | None:
    """What the live view needs (None: no live view, or --json): the draft budget, plain
    decoding's rate from the calibrated t(1) (calibrated by `open_model` when drafts are on)."""
    if not live or as_json:
        return None
    plain = 1.0 / lm.drafting.cost.seconds(1) if draft.enabled else None
    return LiveInfo(budget=draft.budget if draft.enabled else 0, plain_tokens_per_s=plain)


def print_result(result: Result, as_json: bool, err: Console, n_ctx: int = 0, **extra: Any) -> None:
    """The --json object (with `extra` keys) on stdout, or the summary line on stderr."""
    if as_json:
        sys.stdout.write(json.dumps({**json_summary(result), **extra}, ensure_ascii=False) + "\n")
        return
    s = result.stats
    err.print(f"[dim]{summary_line(s.n_tokens, s.decode_s, s.steps, s.alpha, s.prefill_s)}[/dim]", highlight=False)
    if result.context_full:
        err.print(f"stopped: the context of {n_ctx} tokens is full; raise --ctx-size", highlight=False)
