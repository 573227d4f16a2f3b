"""How far a prompt's prefill has gone: llama-server's `prompt_progress`, as an event.

A request that asks for it (`return_progress` on a stream) gets one `Progress` before its
prompt's first decode and one after each decode that took in more of the prompt: every
prefill chunk (at most the context's `n_batch` tokens, or the batched loop's chunk), then the
first verify step, which decodes the prompt's last token as its root. So the first report has
`processed == cache` (only the cached prefix is in), each later one more, and the last
`processed == total`. A long prompt then shows its client how far it has come, as llama-server
shows it, and the reports come from the decodes themselves, not from a timer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """One report of a prompt's prefill."""

    total: int  # the prompt's tokens
    cache: int  # of those, whose KV cells were reused from the prompt cache
    processed: int  # in the KV cache so far, the cached ones included
    elapsed_s: float  # since the request started taking its prompt in
