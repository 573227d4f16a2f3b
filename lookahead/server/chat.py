"""A chat request's prompt: its messages through the service's chat template (the one given
with `--chat-template` / `--chat-template-file`, else the model's own), compiled once.

What the template cannot do with the messages is the client's to fix: a 400 naming
`messages` (a template that refuses a conversation, two assistant messages at the end, a
model with no template), or naming the field that contradicts another
(`continue_final_message` with `add_generation_prompt`).
"""

from __future__ import annotations

import threading
from typing import Any

from lookahead.errors import LookaheadError
from lookahead.models.chat_template import ChatTemplate
from lookahead.server.errors import APIError
from lookahead.server.openai.schemas import ChatInput


class ChatPrompts:
    """The service's chat template and the prompts it makes. `backend` is the model's
    vocabulary (`LlamaVocab`): its GGUF template, its special tokens, its tokenizer."""

    def __init__(self, backend: Any, source: str | None = None) -> None:
        self.backend = backend
        self.source = source  # None: the model's own template
        self._template: ChatTemplate | None = None
        self._lock = threading.Lock()

    def template(self) -> ChatTemplate:
        with self._lock:
            if self._template is None:
                self._template = self.backend.chat_template(self.source)
            return self._template

    def text(self, body: ChatInput) -> str:
        """The prompt text (llama-server's `/apply-template` answer); APIError 400 when the
        template cannot make one of these messages."""
        try:
            return self.template().prompt(body.as_messages(), body.add_generation_prompt, body.continue_final_message)
        except LookaheadError as exc:
            both = body.continue_final_message and body.add_generation_prompt
            raise APIError(400, str(exc), param="continue_final_message" if both else "messages") from exc

    def tokens(self, body: ChatInput) -> list[int]:
        """The prompt's tokens, as the model reads them (its BOS first when it wants one)."""
        return list(self.backend.chat_tokens(self.text(body)))
