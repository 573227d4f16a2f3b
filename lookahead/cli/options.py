"""Option definitions shared by the generating commands (the same flag, the same help).

Every command that takes one of these flags takes it from here.
"""

from __future__ import annotations

from typing import Annotated

import typer

ModelOption = Annotated[
    str, typer.Option("--model", "-m", help="Model name (see `lookahead models list`) or a .gguf path.")
]
MaxTokensOption = Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")]
TemperatureOption = Annotated[
    float, typer.Option(help="0 = greedy; > 0 samples (output distribution is exactly the model's).")
]
SeedOption = Annotated[int | None, typer.Option(help="Random seed for sampling (same seed, same output).")]
StopOption = Annotated[list[str] | None, typer.Option(help="Stop before this string (repeatable).")]
ExactOption = Annotated[
    bool,
    typer.Option(
        "--exact",
        help="Greedy output bit-identical to plain decoding: only verify batch sizes whose logits a "
        "self-test at load found bit-identical (without it, output can differ at near-ties).",
    ),
]
NoSpecOption = Annotated[bool, typer.Option("--no-spec", help="Plain decoding, no drafts (the baseline).")]
NCtxOption = Annotated[int, typer.Option(help="Context length in tokens.")]
ThreadsOption = Annotated[int, typer.Option(help="CPU threads (0 = all available).")]
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
