"""Chat messages to prompt text with a chat template: the model's own (its GGUF metadata), a
name from llama.cpp's list (`chat_formats.BUILTIN`), or any Jinja template the user gives.

Templates are rendered in Jinja's sandbox (a template is data from a model file or a user,
never trusted code), with the environment Hugging Face's chat templates are written for:
`trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`, a
`tojson` that keeps non-ASCII text, and `{% generation %}` blocks passed through.

`ChatTemplate.prompt` also does what llama-server does around the template: leave the
generation prompt off (`add_generation_prompt: false`), or continue the last assistant
message instead of opening a new one (`continue_final_message`, vLLM's name; llama.cpp's
"prefill" when the conversation simply ends with the assistant).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from lookahead.errors import ConfigError, UserError
from lookahead.models.chat_formats import BUILTIN


class ChatTemplateError(UserError):
    """A template that cannot render these messages (it raised, or refused them)."""


class _GenerationTags(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (Hugging Face's marker of assistant text):
    the body is rendered as if the tags were not there."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:  # fmt: skip
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused these messages: {message}")


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTags, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    return env


class ChatTemplate:
    """One compiled chat template; `bos_token` / `eos_token` are the model's special
    tokens' text, which many templates write themselves."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(f"the chat template is not valid Jinja (line {exc.lineno}): {exc.message}") from exc

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        """The template's text for `messages`, with the generation prompt (the opening of
        the assistant's turn) when `add_generation_prompt`."""
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                raise_exception=_raise,
                strftime_now=lambda fmt: datetime.now().strftime(fmt),
            )
        except ChatTemplateError:
            raise
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # a sandbox refusal, an undefined name called, a type the template did not expect
            raise ChatTemplateError(f"the chat template failed on these messages: {exc}") from exc

    def prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        continue_final_message: bool | None = None,
    ) -> str:
        """The prompt for a chat request, as llama-server builds it.

        `continue_final_message` True: the last message is the assistant's unfinished
        answer, and the model goes on writing it (the prompt is the conversation before
        it with the assistant's turn opened, then that text). None: the same whenever the
        conversation ends with the assistant (llama.cpp's prefill), with one assistant
        message at the end at most. Asking for the generation prompt too is an error: the
        two contradict each other.
        """
        if not messages:
            raise UserError("messages is empty")
        last_is_assistant = messages[-1].get("role") == "assistant"
        if continue_final_message is None:
            if last_is_assistant and len(messages) >= 2 and messages[-2].get("role") == "assistant":
                raise UserError("cannot have 2 or more assistant messages at the end of the list")
            continue_final_message = last_is_assistant
            add_generation_prompt = add_generation_prompt and not last_is_assistant
        elif continue_final_message and add_generation_prompt:
            raise UserError("add_generation_prompt and continue_final_message cannot both be true")
        if not continue_final_message:
            return self.render(messages, add_generation_prompt)
        if not last_is_assistant:
            raise UserError("continue_final_message continues an assistant message, but the last message is not one")
        return self.render(messages[:-1], add_generation_prompt=True) + str(messages[-1].get("content") or "")


def template_source(text: str | None, file: Path | None = None, jinja: bool | None = None) -> str | None:
    """The Jinja source `--chat-template TEXT` or `--chat-template-file FILE` names, as
    llama-server reads them: a built-in name (`chatml`, `llama3`, ...) is that template, any
    other text a Jinja template. `jinja` True: the text is always Jinja ("chatml" aside, as
    in llama-server); False: built-in names only. None when neither is given (the model's
    own template). Raises ConfigError, with the reason, for a template that cannot be used."""
    if text is not None and file is not None:
        raise ConfigError("give --chat-template or --chat-template-file, not both")
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read --chat-template-file {file}: {exc}") from exc
    if text is None:
        return None
    if not text.strip():
        raise ConfigError("the chat template is empty")
    named = BUILTIN.get(text.strip())
    if named is not None and (jinja is not True or text.strip() == "chatml"):
        return named
    if jinja is False:
        raise ConfigError(
            f"unknown chat template name {text.strip()[:40]!r} (with --no-jinja only these are "
            f"accepted: {', '.join(BUILTIN)}); to give a Jinja template, leave --no-jinja off"
        )
    check(text)
    return text


def check(source: str) -> None:
    """Raise ConfigError unless `source` compiles and renders a one-message conversation
    (llama.cpp's check of a template given on the command line)."""
    try:
        ChatTemplate(source).render([{"role": "user", "content": "test"}])
    except ChatTemplateError as exc:
        raise ConfigError(f"the chat template cannot render a user message: {exc}") from exc


def names() -> list[str]:
    """The built-in templates' names, in llama.cpp's order."""
    return list(BUILTIN)
