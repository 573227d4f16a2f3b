"""Every option that more than one command takes, declared once: the same flag, the same
help, the same default on every command.

Spellings follow llama.cpp's where it has one (`-m/--model`, `-c/--ctx-size`, `-t/--threads`,
`-n/--max-tokens`, `--temp`, `--top-k`, `--top-p`, `--min-p`, `--repeat-penalty`, `-s/--seed`,
`-np/--parallel`), so what people type by habit works. Drafting and sampling defaults come
from the config dataclasses (`DraftConfig`, `SamplingConfig`, `BackendConfig`), not from
literals here. Old spellings that were renamed are in `RENAMED`: `DeprecatingGroup` still
accepts them, with a one-line note on stderr.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from lookahead.backend.llama import BackendConfig
from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.models.chat_formats import BUILTIN

SAMPLING = SamplingConfig()  # the sampling defaults every command shows
DRAFT = DraftConfig()  # the drafting defaults
CTX_SIZE = BackendConfig().n_ctx  # the context length by default

# --- the model and the machine -------------------------------------------------------------

ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="A model name (see `lookahead models list`), a .gguf path, or hf:OWNER/REPO[:QUANT] "
        "or hf:OWNER/REPO/FILE.gguf (downloaded from Hugging Face once, then read from its cache).",
    ),
]
CtxSizeOption = Annotated[
    int,
    typer.Option("--ctx-size", "-c", help="Context length in tokens (prompt + output); 0 = the model's own."),
]
ThreadsOption = Annotated[int, typer.Option("--threads", "-t", help="CPU threads (0 = all available).")]

# --- what to generate ----------------------------------------------------------------------

MaxTokensOption = Annotated[int, typer.Option("--max-tokens", "-n", "--n-predict", help="Most tokens to generate.")]
ReportMaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-tokens", "-n", "--n-predict", help="Most tokens (default: enough for every record, within the context)."
    ),
]
TempOption = Annotated[
    float,
    typer.Option(
        "--temp", help="Temperature: 0 = greedy; > 0 samples (the output distribution is exactly the model's)."
    ),
]
TopKOption = Annotated[int, typer.Option("--top-k", help="Sample among the k most likely tokens (0 = all).")]
TopPOption = Annotated[float, typer.Option("--top-p", help="Nucleus sampling threshold, in (0, 1].")]
MinPOption = Annotated[
    float, typer.Option("--min-p", help="Drop tokens below min-p times the most likely token's probability.")
]
RepeatPenaltyOption = Annotated[
    float, typer.Option("--repeat-penalty", help="> 1 discourages recently seen tokens (1 = off).")
]
SeedOption = Annotated[
    int | None, typer.Option("--seed", "-s", help="Random seed for sampling (same seed, same output).")
]
StopOption = Annotated[list[str] | None, typer.Option("--stop", help="Stop before this string (repeatable).")]

# name, option, default: what `sampling_options` puts where a command's `sampling` parameter is
SAMPLING_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("temperature", TempOption, SAMPLING.temperature),
    ("top_k", TopKOption, SAMPLING.top_k),
    ("top_p", TopPOption, SAMPLING.top_p),
    ("min_p", MinPOption, SAMPLING.min_p),
    ("repeat_penalty", RepeatPenaltyOption, SAMPLING.repeat_penalty),
    ("seed", SeedOption, None),
)
_Command = TypeVar("_Command", bound=Callable[..., Any])


def sampling_options(command: _Command) -> _Command:
    """The sampling options, declared once for every command that generates: the command's
    `sampling` parameter becomes --temp, --top-k, --top-p, --min-p, --repeat-penalty and
    --seed in its place (typer reads the new signature), and the command receives them
    gathered as `sampling={name: value}`, the keywords `SamplingConfig` takes."""
    signature = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name != "sampling":
            params.append(param)
            continue
        params += [inspect.Parameter(name, param.kind, default=default, annotation=option)
                   for name, option, default in SAMPLING_OPTIONS]  # fmt: skip
    assert len(params) == len(signature.parameters) + len(SAMPLING_OPTIONS) - 1, "no `sampling` parameter"

    @functools.wraps(command)
    def gathered(**options: Any) -> Any:
        sampling = {name: options.pop(name) for name, _, _ in SAMPLING_OPTIONS}
        return command(**options, sampling=sampling)

    gathered.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    gathered.__annotations__ = {p.name: p.annotation for p in params}
    return gathered  # type: ignore[return-value]

# --- how to draft --------------------------------------------------------------------------

NoSpecOption = Annotated[bool, typer.Option("--no-spec", help="Plain decoding, no drafts (the baseline).")]
ExactOption = Annotated[
    bool,
    typer.Option(
        "--exact",
        help="Greedy output bit-identical to plain decoding: only verify batch sizes whose logits a "
        "self-test at load found bit-identical (without it, output can differ at near-ties).",
    ),
]
CorpusOption = Annotated[
    list[Path] | None, typer.Option("--corpus", help="A folder to draft from as a static corpus (repeatable).")
]
NoRecordsOption = Annotated[
    bool,
    typer.Option("--no-records", help="Do not draft report records from the prompt's data rows."),
]
KOption = Annotated[int, typer.Option("--k", help="With --no-adaptive: draft tokens per branch (fixed K).")]
KMaxOption = Annotated[int, typer.Option("--k-max", help="Deepest draft the adaptive controller may verify.")]
BudgetOption = Annotated[int, typer.Option("--budget", help="Most draft tree nodes verified per step.")]
BranchesOption = Annotated[int, typer.Option("--branches", help="Most children per tree node (1 = a single chain).")]
NoAdaptiveOption = Annotated[
    bool, typer.Option("--no-adaptive", help="Fixed K instead of the cost-aware controller.")
]

CompareOption = Annotated[
    bool,
    typer.Option(
        "--compare",
        help="Then decode the same prompt again without drafts and print both speeds, and "
        "whether the two texts match (greedy texts can differ at a near tie; --exact makes them match).",
    ),
]

# --- output --------------------------------------------------------------------------------

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object with the text and statistics.")]
LiveOption = Annotated[
    bool,
    typer.Option(
        "--live",
        help="On a terminal, a live view while it writes: text from accepted drafts in green, "
        "alpha, draft size, tokens/s against plain decoding, accepted lengths (plain output "
        "when stdout is not a terminal, or with --json).",
    ),
]
ServerOption = Annotated[
    str | None,
    typer.Option(
        envvar="LOOKAHEAD_SERVER",
        help="Have the running `lookahead serve` (or llama-server) at this URL write the completion "
        "(no model load here; LOOKAHEAD_API_KEY is sent as its key); if it cannot be reached, "
        "load the model here.",
    ),
]

# --- the service ---------------------------------------------------------------------------

ParallelOption = Annotated[
    int,
    typer.Option(
        "--parallel",
        "-np",
        help="Requests decoded together in one batch per step; 1 = one at a time; "
        "-1 = what pays on this CPU: the largest N <= 4 whose batching bound N*t(1)/t(N) beats what "
        "drafting gains one request at a time on the measured cost curve by 1.35x, else 1 "
        "(0 means the same).",
    ),
]

ServeExactOption = Annotated[
    bool, typer.Option("--exact", help="Greedy output bit-identical to plain decoding, unless a request says not.")
]
IndexScopeOption = Annotated[
    str | None,
    typer.Option(
        "--index-scope",
        help="Whose earlier requests a request drafts from: 'key' (the same API key's) or 'none'. "
        "Default: 'key' with API keys, else 'none' (clients without keys would share one memory, "
        "and a response's accepted count could hint at what another client sent).",
    ),
]
FairOption = Annotated[
    bool | None,
    typer.Option(
        "--fair/--batch-total",
        help="With --parallel, what a request is promised beside its neighbours' drafts: --fair, "
        "that its expected pace never drops below its pace without drafts (no drafts while any "
        "request gains nothing); --batch-total, nothing: the most tokens/s for the batch as a whole "
        "(offline throughput). Default: --fairness-slack 0.1.",
    ),
]
FairnessSlackOption = Annotated[
    float | None,
    typer.Option(
        "--fairness-slack",
        help="With --parallel: verify drafts only where no request's expected pace drops more than "
        "this fraction below its pace without drafts (0 = --fair). Default: 0.1.",
    ),
]
KvUnifiedOption = Annotated[
    bool,
    typer.Option(
        "--kv-unified/--kv-per-request",
        help="With --parallel: one KV cache shared by every request (tree drafts), or one per request "
        "(chain drafts; the default), so that on a batch-invariant model a request's output does not "
        "depend on the requests beside it.",
    ),
]
BATCH_SIZE = 1024  # serve's default: llama.vim's recommended -b (llama-server's own default is 2048)
BatchSizeOption = Annotated[
    int,
    typer.Option(
        "-b",
        "--batch-size",
        help="As llama-server's -b for fill-in-the-middle prompts (/infill, a suffix on "
        "/v1/completions): the tokens given to the code around the cursor, 3/4 before it and 1/4 "
        "after; the rest of the context holds other files' chunks. Smaller: less to read again after "
        "an edit (llama.vim recommends 1024), less code seen.",
    ),
]
CACHE_REUSE = 256  # serve's default: llama.vim's recommended --cache-reuse
CacheReuseOption = Annotated[
    int,
    typer.Option(
        "--cache-reuse",
        help="KV shift, as llama-server's: past the prefix a prompt shares with the cached one, "
        "move cached chunks of at least N tokens that the prompt holds further back (an editor's "
        "window that dropped its first lines) instead of decoding them again; 0 = off. A moved "
        "chunk keeps what it computed beside the dropped text, so the output is close to a cold "
        "start's, not identical; --exact requests always start cold.",
    ),
]
IDLE_TOKENS = 64  # serve's default (docs/editors.md: what it gains after Tab, what it costs)
IdleTokensOption = Annotated[
    int,
    typer.Option(
        "--idle-tokens",
        help="After a fill-in-the-middle answer that a limit ended (an editor's time budget), "
        "while no request waits: read the prompt of the request that assumes it accepted (the "
        "editor's usual next one) into the cache and write up to N tokens of it, drafts for that "
        "request when it comes; any request stops this at once (one whose prompt it is reading lets "
        "the piece in progress finish). Costs CPU while idle; one slot "
        "only (--parallel 1); 0 = off.",
    ),
]

# llama-server's server-wide flags, with its names: defaults for requests that leave a field out
AliasOption = Annotated[
    str | None,
    typer.Option(
        "--alias",
        "-a",
        help="The model's name in /v1/models, /props and responses [default: --model]; several, "
        "comma-separated, are all listed as aliases and the first in sorted order is the name.",
    ),
]
TagsOption = Annotated[
    str | None, typer.Option("--tags", help="Comma-separated tags listed with the model in /v1/models.")
]
ServeTempOption = Annotated[
    float | None,
    typer.Option(
        "--temp", help="Temperature for requests that set none [default: the API's: 1 OpenAI, 0.8 llama.cpp]."
    ),
]
ServeSeedOption = Annotated[
    int | None,
    typer.Option("--seed", "-s", help="Seed for requests that set none (-1: a fresh one per request, the default)."),
]
ServeNPredictOption = Annotated[
    int | None,
    typer.Option(
        "--n-predict",
        "-n",
        help="Most tokens for requests that set no max_tokens / n_predict (-1: until the context is full) "
        "[default: the API's: 16 for /v1/completions, no limit elsewhere].",
    ),
]
SlotsOption = Annotated[
    bool, typer.Option("--slots/--no-slots", help="Serve GET /slots (the slots and whether each is busy).")
]
CorsOriginsOption = Annotated[
    str,
    typer.Option(
        "--cors-origins",
        help="Comma-separated origins browser pages may call from: 'localhost' pages on this machine "
        "(the default), exact origins such as https://app.example.com, or '*' any (without cookies). "
        "A POST from any other page is refused (403).",
    ),
]
ChatTemplateOption = Annotated[
    str | None,
    typer.Option(
        "--chat-template",
        help=f"The chat template for chat requests [default: the model's own]: a name ({', '.join(BUILTIN)}) "
        "or a Jinja template's text.",
    ),
]
ChatTemplateFileOption = Annotated[
    Path | None, typer.Option("--chat-template-file", help="Read the chat template (Jinja) from this file.")
]
JinjaOption = Annotated[
    bool | None,
    typer.Option(
        "--jinja/--no-jinja",
        help="How --chat-template is read [default: a known name is that template, else Jinja]: --jinja "
        "always as Jinja (chatml aside), --no-jinja as a name only.",
    ),
]

# --- renamed spellings ---------------------------------------------------------------------

# command -> {old flag: new flag}. The old spellings keep working for a release.
_GENERATING = {"--n-ctx": "--ctx-size", "--temperature": "--temp"}
RENAMED: dict[str, dict[str, str]] = {
    "generate": _GENERATING,
    "report": _GENERATING,
    "complete": {**_GENERATING, "--context": "--corpus", "--no-context": "--no-corpus"},
    "serve": {"--n-ctx": "--ctx-size"},
}


def rename_args(command: str, args: list[str], warn: Any = None) -> list[str]:
    """`args` with `command`'s renamed flags spelled the new way (`--old V` and `--old=V`),
    each renaming noted once through `warn(line)` (default: a line on stderr). Nothing
    after a `--` is touched: it is data, not a flag."""
    table = RENAMED.get(command, {})
    note = warn or (lambda line: typer.echo(line, err=True))
    out: list[str] = []
    noted: set[str] = set()
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        old, eq, value = arg.partition("=")
        new = table.get(old)
        if new is None:
            out.append(arg)
            continue
        if old not in noted:
            noted.add(old)
            note(f"note: {old} is deprecated and will be removed; use {new}")
        out.append(new + eq + value)
    return out


class DeprecatingGroup(TyperGroup):
    """The command group: it rewrites a command's renamed flags before the command parses
    them, so both spellings reach the same parameter."""

    # Any: typer vendors its own click, whose types are private to it
    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        return name, command, rename_args(name or "", rest)

ReplicaIdOption = Annotated[
    str | None,
    typer.Option(
        "--replica-id",
        help="This replica's name in the X-Lookahead-Replica header and /metrics [default: the host's name].",
    ),
]
GracePeriodOption = Annotated[
    float,
    typer.Option(
        "--grace-period",
        help="Seconds from SIGTERM to exit: new requests get 503, running ones finish, the index is saved.",
    ),
]
