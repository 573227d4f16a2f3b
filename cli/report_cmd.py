"""`lookahead report`: a templated report, one record per data row (see `lookahead.apps.report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from lookahead.api import check_prompt_fits, has_chat_template
from lookahead.apps.report import build_report, check_output, save
from lookahead.cli.generate_cmd import check_options, live_info, open_model, print_result
from lookahead.cli.live import show
from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig


def run_report(
    template: Path,
    data: Path,
    *,
    output: Path | None,
    chat: bool | None,
    model: str,
    max_tokens: int | None,
    sampling: dict[str, Any],
    draft: dict[str, Any],
    stop: tuple[str, ...] = (),
    as_json: bool,
    live: bool,
    n_ctx: int,
    threads: int,
) -> None:
    # every input is checked before the model loads
    sampling_cfg = SamplingConfig(**sampling)
    draft_cfg = DraftConfig(**draft)
    check_options(max_tokens=max_tokens, n_ctx=n_ctx, threads=threads, draft=draft_cfg)
    if output is not None:
        check_output(output)
    report = build_report(template, data)
    err = Console(stderr=True)

    def check(path: Path) -> bool:
        use_chat = has_chat_template(path) if chat is None else chat
        check_prompt_fits(path, report.prompt, use_chat, n_ctx)
        return use_chat

    lm, use_chat = open_model(model, n_ctx=n_ctx, threads=threads, draft=draft_cfg, live=live, err=err, check=check)
    tokens = lm.prompt_tokens(report.prompt, use_chat)
    limit = max_tokens or report.max_tokens(lm.backend.n_ctx - len(tokens) - 1)
    events = lm.stream(
        report.prompt, tokens=tokens, max_tokens=limit, stop=stop, sampling=sampling_cfg, draft=draft_cfg
    )
    result = show(events, echo=not as_json and output is None, live=live_info(lm, draft_cfg, live, as_json), err=err)
    if output is not None:
        save(output, result.text if result.text.endswith("\n") else result.text + "\n")
    print_result(result, as_json, err, lm.backend.n_ctx, **({"output": str(output)} if output is not None else {}))
