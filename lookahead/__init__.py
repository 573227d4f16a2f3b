"""lookahead: model-free speculative decoding for llama.cpp on ordinary CPUs.

    import lookahead
    model = lookahead.load()                      # the default model, a name, or a .gguf path
    print(model.generate("def fib(n):", max_tokens=64).text)

Names are imported lazily so the drafting core (indexes, proposer, controller) can be used
and tested without loading llama.cpp.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DraftConfig", "Model", "SamplingConfig", "load"]


def __getattr__(name: str) -> Any:
    if name in ("load", "Model"):
        from lookahead import api

        return getattr(api, name)
    if name == "DraftConfig":
        from lookahead.core.draft_state import DraftConfig

        return DraftConfig
    if name == "SamplingConfig":
        from lookahead.core.sampling import SamplingConfig

        return SamplingConfig
    raise AttributeError(f"module 'lookahead' has no attribute {name!r}")
