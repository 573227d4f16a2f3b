"""The `lookahead` command line: thin wrappers over the library."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from lookahead.cli.errors import fail, handled
from lookahead.cli.extras import print_version
from lookahead.cli.models_cmd import CacheDirOption, models_app
from lookahead.cli.options import (
    CTX_SIZE,
    DRAFT,
    BranchesOption,
    BudgetOption,
    CompareOption,
    CorpusOption,
    CtxSizeOption,
    DeprecatingGroup,
    ExactOption,
    JsonOption,
    KMaxOption,
    KOption,
    LiveOption,
    MaxTokensOption,
    ModelOption,
    NoAdaptiveOption,
    NoRecordsOption,
    NoSpecOption,
    ReportMaxTokensOption,
    ServerOption,
    StopOption,
    ThreadsOption,
    sampling_options,
)
from lookahead.cli.serve_command import serve
from lookahead.models import catalog as models

app = typer.Typer(
    help="Faster local LLM generation on CPUs with model-free speculative decoding "
    "(n-gram / suffix / corpus / report-record drafts, verified by the model in one batch). "
    "Sampled output has exactly the model's distribution; greedy output is bit-identical to "
    "plain decoding only with --exact (llama.cpp's batched kernels move logits slightly, so "
    "the default can differ at near-ties).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=DeprecatingGroup,
)
app.add_typer(models_app, name="models")


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Faster local LLM generation on CPUs with model-free speculative decoding."""

@app.command()
@sampling_options
def generate(
    prompt: Annotated[str | None, typer.Argument(help="The prompt text (or use --prompt-file / stdin).")] = None,
    prompt_file: Annotated[
        Path | None, typer.Option("--prompt-file", "-f", help="Read the prompt from this file.")
    ] = None,
    chat: Annotated[bool, typer.Option(help="Wrap the prompt as a user message in the model's chat template.")] = False,
    model: ModelOption = models.DEFAULT_MODEL,
    max_tokens: MaxTokensOption = 256,
    sampling: dict[str, Any] | None = None,  # --temp ... --seed (sampling_options)
    stop: StopOption = None,
    k: KOption = DRAFT.k,
    k_max: KMaxOption = DRAFT.k_max,
    budget: BudgetOption = DRAFT.budget,
    branches: BranchesOption = DRAFT.branches,
    no_adaptive: NoAdaptiveOption = False,
    exact: ExactOption = False,
    corpus: CorpusOption = None,
    no_records: NoRecordsOption = False,
    no_spec: NoSpecOption = False,
    compare: CompareOption = False,
    as_json: JsonOption = False,
    live: LiveOption = False,
    n_ctx: CtxSizeOption = CTX_SIZE,
    threads: ThreadsOption = 0,
) -> None:
    """Generate text from a prompt, streaming it to stdout.

    Example: lookahead generate --compare --chat "Rename n to count in: def total(n): ..."
    """
    from lookahead.cli.generate_cmd import read_prompt, run_generate

    with handled():
        text = read_prompt(prompt, prompt_file)
        run_generate(
            text=text,
            chat=chat,
            model=model,
            max_tokens=max_tokens,
            sampling=sampling or {},
            stop=tuple(stop or ()),
            draft=dict(
                enabled=not no_spec, adaptive=not no_adaptive, k=k, k_max=k_max, budget=budget, branches=branches,
                exact=exact, corpora=tuple(corpus or ()), records=not no_records,
            ),  # fmt: skip
            as_json=as_json,
            n_ctx=n_ctx,
            threads=threads,
            live=live,
            compare=compare,
        )


@app.command()
@sampling_options
def report(
    template: Annotated[
        Path, typer.Argument(help="Markdown: the instructions and one record's shape (a Jinja2 template).")
    ],
    data: Annotated[Path, typer.Argument(help="The rows: CSV with a header, JSON (a list of objects) or JSON Lines.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to this file (replaced whole, at the end).")
    ] = None,
    chat: Annotated[
        bool | None,
        typer.Option("--chat/--no-chat", help="Use the model's chat template (default: when the model has one)."),
    ] = None,
    model: ModelOption = models.DEFAULT_MODEL,
    max_tokens: ReportMaxTokensOption = None,
    sampling: dict[str, Any] | None = None,  # --temp ... --seed (sampling_options)
    stop: StopOption = None,
    as_json: JsonOption = False,
    live: LiveOption = False,
    no_spec: NoSpecOption = False,
    exact: ExactOption = False,
    corpus: CorpusOption = None,
    no_records: NoRecordsOption = False,
    n_ctx: CtxSizeOption = CTX_SIZE,
    threads: ThreadsOption = 0,
) -> None:
    """Write a report with one record per data row: the template (instructions and the
    shape of one record, e.g. `### <region>`) and the data become the prompt, and the record
    index drafts each record from the one before and the row's values (see README).

    Example: lookahead report examples/sales/weekly.md examples/sales/sales.csv -o report.md
    """
    from lookahead.cli.report_cmd import run_report

    with handled():
        run_report(
            template,
            data,
            output=output,
            chat=chat,
            model=model,
            max_tokens=max_tokens,
            sampling=sampling or {},
            stop=tuple(stop or ()),
            draft=dict(enabled=not no_spec, exact=exact, corpora=tuple(corpus or ()), records=not no_records),
            as_json=as_json,
            live=live,
            n_ctx=n_ctx,
            threads=threads,
        )


app.command()(serve)


@app.command()
def doctor(
    model: ModelOption = models.DEFAULT_MODEL,
    threads: ThreadsOption = 0,
    no_exact: Annotated[
        bool, typer.Option("--no-exact", help="Skip the exactness self-test (a few seconds).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (for bug reports).")] = False,
    cache_dir: CacheDirOption = None,
) -> None:
    """Check this machine: CPU, llama.cpp build, which CPU path works, the verify cost curve
    and the speedup ceiling it implies, exact batch sizes, caches, installed models.

    Example: lookahead doctor --json > doctor.json  (attach it to a bug report)
    """
    from lookahead.cli.doctor_cmd import run_doctor

    with handled():
        if threads < 0:
            fail(f"--threads must be >= 0 (0 = all available), got {threads}")
        code = run_doctor(
            model=model,
            cache_dir=cache_dir or models.default_cache_dir(),
            threads=threads,
            exact=not no_exact,
            as_json=as_json,
        )
    if code:
        raise typer.Exit(code)


@app.command()
@sampling_options
def complete(
    file: Annotated[Path, typer.Argument(help="The source file to complete in.")],
    line: Annotated[
        int | None, typer.Option("--line", "-l", help="The cursor's line (1-based), instead of a marker.")
    ] = None,
    col: Annotated[
        int | None,
        typer.Option("--col", help="With --line: the cursor's column (1-based; default: the end of the line)."),
    ] = None,
    marker: Annotated[
        str, typer.Option(help="Without --line: the cursor is this text in the file (taken out).")
    ] = "<CURSOR>",
    fim: Annotated[
        bool,
        typer.Option(
            "--fim/--no-fim",
            help="Fill in the middle (the model sees the code after the cursor too) when the model "
            "has FIM tokens; --no-fim: complete from the code before the cursor only.",
        ),
    ] = True,
    context: Annotated[
        Path | None,
        typer.Option(
            "--corpus",
            help="Draft from the code in this folder (.gitignore respected; default: FILE's git repository).",
        ),
    ] = None,
    no_context: Annotated[bool, typer.Option("--no-corpus", help="Do not draft from other files.")] = False,
    no_block_stop: Annotated[
        bool,
        typer.Option(
            "--no-block-stop",
            help="Do not stop at the end of the cursor's block (Python indentation, brackets elsewhere).",
        ),
    ] = False,
    write: Annotated[
        bool, typer.Option("--write", "-w", help="Insert the completion into FILE at the cursor.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON object: completion, line, col, fim, written and statistics."),
    ] = False,
    model: ModelOption = models.DEFAULT_MODEL,
    max_tokens: MaxTokensOption = 128,
    sampling: dict[str, Any] | None = None,  # --temp ... --seed (sampling_options)
    stop: StopOption = None,
    exact: ExactOption = False,
    no_spec: NoSpecOption = False,
    n_ctx: CtxSizeOption = CTX_SIZE,
    threads: ThreadsOption = 0,
    live: LiveOption = False,
    server: ServerOption = None,
) -> None:
    """Complete code at a cursor in FILE and print it (or --write it in, or --json).

    The cursor is --line L [--col C], or a <CURSOR> marker in the file (not both).
    It stops at the end of the cursor's block or function, --max-tokens, or a --stop string.

    Example: lookahead complete src/stats.py --line 12 --json
    """
    options = dict(locals())  # every option above, by name: run_complete takes them all
    from lookahead.cli.complete_cmd import run_complete

    with handled():
        run_complete(**options)


@app.command()
def examples(
    dest: Annotated[Path, typer.Argument(help="The folder to copy them into (created if need be).")] = Path("examples"),
) -> None:
    """Copy the examples shipped with lookahead (a report template and its CSV data) into DEST.

    Example: lookahead examples && lookahead report examples/sales/weekly.md examples/sales/sales.csv
    """
    from lookahead.cli.examples_cmd import copy_examples

    with handled():
        for path in copy_examples(dest):
            typer.echo(str(path))


@app.command()
def bench(
    model: ModelOption = models.DEFAULT_MODEL,
    kinds: Annotated[
        str | None,
        typer.Option(help="Comma list of task kinds: code_edit, report, completion, summarize, prose (default: all)."),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            help="Comma list of methods (plain is always added): plain, adaptive, exact, fixed1..fixed32, tree, "
            "oracle, oracle1..oracle32, oracle_policy, pld2, pld10, plain_llama, server_* (see bench/README.md) "
            "[default: all but a few extras; a smaller set with --quick]."
        ),
    ] = None,
    repeats: Annotated[int | None, typer.Option(help="Interleaved repeats (default: 3; 1 with --quick).")] = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", "-n", help="Tokens per run (default: 128; 40 with --quick).")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="A few minutes: one prompt per kind, short outputs, 1 repeat, fewer methods.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="Output folder (default: bench/results/<date>-<cpu>/ in the checkout)."),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue an interrupted bench in --out: skip the runs it already recorded.")
    ] = False,
    per_kind: Annotated[
        int | None,
        typer.Option("--per-kind", help="At most this many prompts per kind (default: all; 1 with --quick)."),
    ] = None,
    prompt_set: Annotated[
        str,
        typer.Option(
            "--set",
            help="Prompt set: bench (the reported one); fresh (held out: written after tuning, never "
            "tuned against); for tuning: tune, data (reports), pasted (the tune set's code edits without fences).",
        ),
    ] = "bench",
    threads: Annotated[
        int, typer.Option("--threads", "-t", help="CPU threads for every method (0 = all available).")
    ] = 0,
    llama_server: Annotated[
        Path | None,
        typer.Option(
            "--llama-server",
            help="A llama-server binary: also run its --spec-type ngram-simple and ngram-mod "
            "(a fresh server per prompt).",
        ),
    ] = None,
) -> None:
    """Benchmark decoding methods side by side on this machine: speed vs plain decoding, acceptance,
    latency, the oracle ceiling. Writes the raw runs (JSON lines, kept as they finish), tables, PNG charts
    and an HTML report. Runs the bench/ suite of a source checkout, installed with its bench extra.

    Example: lookahead bench --quick
    """
    options = dict(locals())  # the options as given: the bench's configuration, by the same names
    from lookahead.cli.bench_cmd import run_bench

    with handled():
        run_bench(options)


if __name__ == "__main__":  # pragma: no cover
    app()
