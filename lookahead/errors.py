"""The library's own exception types, kept apart by whose move it is.

- `UserError`: the input or the configuration is wrong, and the message says what to
  change (an unknown model, a prompt longer than the context, `top_p` 2). The CLI prints
  it as one `error:` line; the server answers 400.
- `BackendError`: llama.cpp could not load or run the model as configured (a damaged file,
  a CPU path that crashes). Also one line: it is about the machine, not our code.
- Anything else is a bug in lookahead: the CLI shows its traceback and asks for a report,
  instead of passing it off as the user's mistake.

`UserError` is also a `ValueError`, so callers that caught ValueError from a config's
validation keep working. This module imports nothing from the package, so every layer may
import it.
"""

from __future__ import annotations


class LookaheadError(Exception):
    """Base of every error lookahead raises on purpose."""


class UserError(LookaheadError, ValueError):
    """Bad input or configuration; the message says what to change."""


class ConfigError(UserError):
    """A configuration value out of range (a config dataclass's validation)."""


class BackendError(LookaheadError):
    """The model could not be loaded or evaluated."""


class Interrupted(LookaheadError):
    """A generation stopped on request between two prefill chunks (its client left)."""


class BackendUnsupported(BackendError):
    """No llama.cpp configuration runs correctly on this CPU (see the backend probe)."""


# What the edges (CLI, server) report as one line instead of a traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (LookaheadError,)


def utf8(text: str) -> bytes:
    """`text` as UTF-8 bytes; UserError for text that has none (a lone surrogate, which JSON's
    "\\ud800" decodes to), so a client's bad string is its error, not a crash."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(f"the text is not valid Unicode: {exc.reason} at character {exc.start}") from None
