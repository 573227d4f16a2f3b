"""Request bodies of llama.cpp's own server API (`/infill`, `/completion`, `/tokenize`, ...),
with llama.cpp's field names and defaults, so its clients (llama.vim, llama.vscode, its web
UI and test suite) can talk to this service unchanged.

Fields llama.cpp has and this service does not act on are accepted and ignored when
ignoring them does not change the text a client gets (`t_max_prompt_ms`, which llama.cpp
itself does not implement; `cache_prompt`, `id_slot`, `n_keep`, ...); the few that would
change it and are not implemented are a 400 naming the field. `logit_bias` is read with
the model's tokenizer (`logit_bias.py`); `grammar` and `json_schema` constrain the output
(`constrained.py`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from lookahead.core.sampling import SamplingConfig
from lookahead.server import request_limits as limits
from lookahead.server.options import LookaheadOptions
from lookahead.server.unsupported import refuse_unsupported

# llama.cpp's sampling defaults (common_params_sampling)
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
MAX_COMPLETIONS = limits.COMPLETIONS.most  # n_cmpl: llama.cpp allows up to its slot count, 4 by default

# The samplers of llama.cpp's chain this service applies when a request lists them (it
# applies them in its own fixed order, `infill` after top-k/top-p when sampling; see
# `lookahead.core.sampling`). The rest of llama.cpp's names (`dry`, `typ_p`, `xtc`,
# `top_n_sigma`, ...) are accepted and skipped, as llama.cpp skips names it does not know.
KNOWN_SAMPLERS = {"top_k", "top_p", "min_p", "temperature", "penalties", "infill"}


class NativeRequest(BaseModel):
    """What `/completion` and `/infill` share: generation limits, sampling, response shape."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    model: str | None = None
    n_predict: int = Field(default=-1, ge=-1)  # -1: until EOS/context
    max_tokens: int | None = Field(default=None, ge=-1)  # an alias llama.cpp accepts too
    temperature: float = Field(default=DEFAULT_TEMPERATURE, ge=0.0, allow_inf_nan=False)
    top_k: int = Field(default=DEFAULT_TOP_K, ge=0)
    top_p: float = Field(default=DEFAULT_TOP_P, ge=0.0, le=1.0)
    min_p: float = Field(default=DEFAULT_MIN_P, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0)
    repeat_last_n: int = Field(default=64, ge=0)
    seed: int = -1  # -1 (or any negative, or 2^32 - 1): a fresh seed
    samplers: list[str] | str | None = None
    stop: list[str] | str | None = None
    stream: bool = False
    n_indent: int = Field(default=0, ge=0)
    t_max_prompt_ms: int = -1  # accepted, not acted on (llama.cpp does not either)
    t_max_predict_ms: int = -1  # stop at a newline once this much time passed since the first token
    cache_prompt: bool = True
    return_progress: bool = False  # with stream: pieces with `prompt_progress` while the prompt is read
    id_slot: int = -1
    response_fields: list[str] | None = None
    return_tokens: bool = False
    n_cmpl: int | None = Field(default=None, ge=1, le=MAX_COMPLETIONS)
    n: int | None = Field(default=None, ge=1, le=MAX_COMPLETIONS)
    n_probs: int = Field(default=0, ge=0)  # completion_probabilities: the n most likely tokens at each
    post_sampling_probs: bool = False  # ... of the distribution drawn from, not the model's
    logit_bias: Any = None  # read with the model's tokenizer: `logit_bias.py`
    grammar: str | None = None  # GBNF rules the output must follow (`constrained.py`)
    json_schema: Any = None  # ... or a JSON schema it must fit
    grammar_lazy: Any = None  # a grammar applied from a trigger on: not implemented (400)
    lookahead: LookaheadOptions | None = None

    _refuse = field_validator("grammar_lazy")(refuse_unsupported)

    @field_validator("n_probs")
    @classmethod
    def _n_probs(cls, v: int) -> int:
        limits.bounded(limits.N_PROBS, v)
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: list[str] | str | None) -> list[str] | str | None:
        limits.bounded(limits.STOP, len(v) if isinstance(v, list) else 1)
        return v

    _bias_entries = field_validator("logit_bias")(limits.bias_entries)
    _grammar_size = field_validator("grammar")(limits.grammar_size)
    _schema_size = field_validator("json_schema")(limits.schema_size)

    @model_validator(mode="after")
    def _alias_limits(self) -> NativeRequest:
        if self.max_tokens is not None and "n_predict" not in self.model_fields_set:
            self.n_predict = self.max_tokens
        return self

    def completions(self) -> int:
        return self.n_cmpl or self.n or 1

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return tuple(s for s in stops if s)

    def samplers_named(self) -> list[str] | None:
        """The sampler chain the request lists (None: llama.cpp's default chain)."""
        return self.samplers.split(";") if isinstance(self.samplers, str) else self.samplers

    def uses_infill(self) -> bool:
        """Whether the chain lists llama.cpp's `infill` sampler (editors' FIM requests do)."""
        return "infill" in (self.samplers_named() or ())

    def sampling(self) -> SamplingConfig:
        """llama.cpp's sampler chain as far as this service has it: a listed `samplers`
        chain keeps only the samplers it names (without `temperature` the draw is at
        temperature 1, as in llama.cpp); temperature 0 is greedy."""
        names = self.samplers_named()
        on = set(KNOWN_SAMPLERS - {"infill"} if names is None else names)
        greedy = self.temperature <= 0
        seed = None if self.seed < 0 or self.seed == 0xFFFFFFFF else self.seed
        return SamplingConfig(
            temperature=0.0 if greedy else (self.temperature if "temperature" in on else 1.0),
            top_k=self.top_k if "top_k" in on else 0,
            top_p=(self.top_p or 1.0) if "top_p" in on and self.top_p > 0 else 1.0,
            min_p=self.min_p if "min_p" in on else 0.0,
            repeat_penalty=self.repeat_penalty if "penalties" in on else 1.0,
            repeat_last_n=self.repeat_last_n,
            seed=seed,
            n_probs=self.n_probs,
            post_sampling_probs=self.post_sampling_probs,
        )


class ExtraChunk(BaseModel):
    """One `input_extra` chunk: text from another file (its name optional)."""

    model_config = ConfigDict(extra="ignore")

    text: StrictStr
    filename: StrictStr = "tmp"


class InfillRequest(NativeRequest):
    input_prefix: StrictStr
    input_suffix: StrictStr
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: StrictStr = ""

    @field_validator("input_extra")
    @classmethod
    def _extra_chunks(cls, v: list[ExtraChunk]) -> list[ExtraChunk]:
        limits.bounded(limits.INPUT_EXTRA, len(v))
        return v

    @model_validator(mode="after")
    def _fim_text(self) -> InfillRequest:
        size = len(self.input_prefix) + len(self.input_suffix) + len(self.prompt)
        total = size + sum(len(c.text) + len(c.filename) for c in self.input_extra)
        limits.bounded(limits.FIM_TEXT, total, "input_prefix + input_suffix + input_extra + prompt")
        return self


Prompt = str | list[int | str]  # one prompt: text, token ids, or a mix of both


def _one_prompt(v: Any) -> Prompt:
    """One prompt in any of llama.cpp's forms, the object form (`{"prompt_string": ...}`) read
    to its text; ValueError for what is not a prompt."""
    if isinstance(v, dict):
        if v.get("multimodal_data"):
            raise ValueError("multimodal_data is not supported by this server (text models only)")
        v = v.get("prompt_string")
    if isinstance(v, str):
        if not v:
            raise ValueError("the prompt is empty")
        return v
    if isinstance(v, list) and v and all(isinstance(t, int | str) and not isinstance(t, bool) for t in v):
        return list(v)
    raise ValueError("a prompt is a text, a list of token ids (texts may be mixed in), or {'prompt_string': text}")


class CompletionRequest(NativeRequest):
    """`/completion`: the prompt as text, as token ids, or a mix (llama.cpp's forms), or a
    list of such prompts (each answered in turn, the answer a list), read as llama.cpp reads
    them: a list of ids, or of ids and texts, is one prompt; any other list is several."""

    prompt: StrictStr | dict[str, Any] | list[Any]

    @field_validator("prompt")
    @classmethod
    def _prompts_readable(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("the prompt is empty")
        limits.bounded(limits.PROMPTS, len(cls.split(v)))
        return v

    @staticmethod
    def split(v: Any) -> list[Prompt]:
        if isinstance(v, list) and not any(isinstance(t, int) and not isinstance(t, bool) for t in v):
            return [_one_prompt(p) for p in v]  # texts, id lists, objects: one prompt each
        return [_one_prompt(v)]

    def prompts(self) -> list[Prompt]:
        """The request's prompts, each as text, ids or a mix."""
        return self.split(self.prompt)


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: StrictStr
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tokens: list[int]
