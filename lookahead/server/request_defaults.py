"""Server-wide defaults for what a request leaves out (`lookahead serve --temp/--seed/
--n-predict`, as llama-server has them): a field the request names keeps its value; one it
leaves out takes the server's default instead of the API's own. Applied on every route, to
OpenAI's bodies (`temperature`, `seed`, `max_tokens`) and llama.cpp's (`temperature`,
`seed`, `n_predict`), and shown in `/props`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from lookahead.errors import ConfigError

Body = TypeVar("Body", bound=BaseModel)


@dataclass(frozen=True)
class RequestDefaults:
    """None: the API's own default (OpenAI's or llama.cpp's, per route)."""

    temperature: float | None = None  # >= 0; 0 = greedy
    seed: int | None = None  # >= 0; a request without a seed draws with this one
    n_predict: int | None = None  # >= 1, or -1: until the model ends or the context is full

    def __post_init__(self) -> None:
        if self.temperature is not None and not self.temperature >= 0:
            raise ConfigError(f"--temp must be >= 0, got {self.temperature}")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise ConfigError(f"--seed must be in 0..{2**32 - 1} (or -1: a fresh seed per request), got {self.seed}")
        if self.n_predict is not None and (self.n_predict == 0 or self.n_predict < -1):
            raise ConfigError(f"--n-predict must be >= 1 or -1 (no limit), got {self.n_predict}")

    def apply(self, body: Body) -> Body:
        """`body` with the defaults in the fields it left out (a copy; `body` is kept)."""
        given = body.model_fields_set
        fields = type(body).model_fields
        update: dict[str, object] = {}
        if self.temperature is not None and "temperature" not in given:
            update["temperature"] = self.temperature
        if self.seed is not None and "seed" not in given:
            update["seed"] = self.seed
        limit = self.n_predict
        if limit is not None and not given & {"n_predict", "max_tokens", "max_completion_tokens"}:
            if "n_predict" in fields:  # llama.cpp's routes: -1 is "no limit"
                update["n_predict"] = limit
            elif "max_tokens" in fields:  # OpenAI's: None is "no limit"
                update["max_tokens"] = None if limit < 0 else limit
        return body.model_copy(update=update) if update else body


def from_options(temperature: float | None, seed: int | None, n_predict: int | None) -> RequestDefaults:
    """The defaults from `lookahead serve`'s flags, where -1 (llama-server's own default) for
    --seed means no server seed."""
    return RequestDefaults(
        temperature=temperature,
        seed=None if seed is None or seed == -1 else seed,
        n_predict=n_predict,
    )
