"""Request bodies of the OpenAI-compatible API: OpenAI's field names, types and defaults.

Pydantic validates types and ranges; what it rejects becomes an OpenAI-style 400 (see
`errors.py`). Fields OpenAI has and we do not act on (`user`, ...) are accepted and
ignored, as OpenAI's own clients send some of them by default; those whose absence would
change the answer (`tools`, `functions`, `best_of`) are a 400 naming them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lookahead.server import request_limits as limits
from lookahead.server.options import LookaheadOptions
from lookahead.server.unsupported import refuse_unsupported

MAX_STOPS = 4  # OpenAI's limit on stop sequences (below the service's own, `request_limits.STOP`)
MAX_CHOICES = limits.COMPLETIONS.most  # choices per request (`n`), as llama.cpp's `n_cmpl`


class Prediction(BaseModel):
    """OpenAI Predicted Outputs: text the output is expected to repeat for the most part."""

    type: Literal["content"] = "content"
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        # the array form: [{"type": "text", "text": "..."}, ...]
        return "".join(str(part.get("text", "")) for part in self.content if isinstance(part, dict))


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)  # choices, each a sample of its own (`choices.py`)
    prediction: Prediction | None = None
    lookahead: LookaheadOptions | None = None
    # llama.cpp's extension, on by default as there: reuse the KV cells of the prefix this
    # prompt shares with an earlier one (a chat's next turn shares its history)
    cache_prompt: bool = True
    # llama.cpp's extension: with `stream`, chunks with `prompt_progress` while the prompt goes in
    return_progress: bool = False
    logit_bias: Any = None  # token id (or text) -> bias, read with the model's tokenizer (`logit_bias.py`)
    # constrained output (`constrained.py`): OpenAI's response_format, llama-server's grammar
    # (GBNF) and json_schema; one of them per request
    response_format: Any = None
    grammar: Any = None
    json_schema: Any = None
    grammar_lazy: Any = None  # llama.cpp's grammar applied from a trigger on: not implemented
    # OpenAI fields this service does not implement, where ignoring them would change what
    # the client gets: a 400 naming the field (`unsupported.py`)
    tools: Any = None
    functions: Any = None
    # chat: `logprobs` true and `top_logprobs` 0-20; /v1/completions: `logprobs` 0-5 (the count)
    logprobs: bool | int | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    best_of: Any = None
    verbose: bool = False  # llama-server's: add `__verbose`, the answer in its own API's shape

    _refuse = field_validator("tools", "functions", "best_of", "grammar_lazy")(refuse_unsupported)

    _bias_entries = field_validator("logit_bias")(limits.bias_entries)
    _grammar_size = field_validator("grammar")(limits.grammar_size)
    _schema_size = field_validator("json_schema", "response_format")(limits.schema_size)

    @field_validator("logprobs")
    @classmethod
    def _logprobs(cls, v: bool | int | None) -> bool | int | None:
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= 20:
            raise ValueError("logprobs must be true/false, or a count of candidates from 0 to 20")
        return v

    def n_probs(self) -> int:
        """Candidates to report per token (0: no logprobs asked for)."""
        if self.logprobs is None or self.logprobs is False:
            return 0
        if self.logprobs is True:  # chat's form: the top list is top_logprobs long
            return max(1, self.top_logprobs or 0)
        return max(1, int(self.logprobs))

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return v

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class CompletionRequest(_Common):
    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for completions
    echo: bool = False
    suffix: str | None = None  # the text after the completion: a fill-in-the-middle prompt

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            if len(v) != 1:
                raise ValueError("one prompt per request (a list of exactly one string)")
            v = v[0]
        if not v:
            raise ValueError("the prompt is empty")
        return v

    @model_validator(mode="after")
    def _fim_text(self) -> CompletionRequest:
        if self.suffix:  # a fill-in-the-middle prompt: bounded as /infill's text
            limits.bounded(limits.FIM_TEXT, len(self.text()) + len(self.suffix), "prompt + suffix")
        return self

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None

    @field_validator("content")
    @classmethod
    def _text_only(cls, v: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        # an image or audio part left out would answer a question about what it shows
        for part in v if isinstance(v, list) else []:
            kind = part.get("type", "text") if isinstance(part, dict) else "text"
            if kind != "text":
                raise ValueError(f"{kind} content is not supported by this server (text models only)")
        return v

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))
        return self.content or ""


class ChatInput(BaseModel):
    """A conversation and how the chat template turns it into a prompt (chat completions,
    `/apply-template`, `/v1/chat/completions/input_tokens`)."""

    model_config = ConfigDict(extra="ignore")

    messages: list[ChatMessage] = Field(min_length=1)
    # the opening of the assistant's turn after the messages (llama-server's and vLLM's field)
    add_generation_prompt: bool = True
    # go on writing the last (assistant) message instead of opening a new turn (vLLM's field);
    # None: do so whenever the messages end with the assistant's (llama-server's prefill)
    continue_final_message: bool | None = None

    def as_messages(self) -> list[dict[str, str]]:
        # the template knows system/user/assistant; a developer message is a system one
        role = {"developer": "system"}
        return [{"role": role.get(m.role, m.role), "content": m.text()} for m in self.messages]


class ChatCompletionRequest(_Common, ChatInput):
    max_tokens: int | None = Field(default=None, ge=1)  # None: until the context is full
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens
