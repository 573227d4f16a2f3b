"""What the routes share: the model once loaded (on a thread, so /health answers meanwhile),
its worker (serial or batched), the memory of earlier requests, and the metrics."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from lookahead.api import Model
from lookahead.errors import LookaheadError
from lookahead.server.batch_worker import BatchWorker
from lookahead.server.chat import ChatPrompts
from lookahead.server.config import ServeConfig
from lookahead.server.memory import SharedIndex
from lookahead.server.metrics import Metrics
from lookahead.server.worker import Worker

log = logging.getLogger("lookahead.server")


class Service:
    """What the routes share: the model once loaded, its worker, memory and metrics."""

    def __init__(self, config: ServeConfig, loader: Callable[[], Model]) -> None:
        self.config = config
        self.loader = loader
        self.metrics = Metrics()
        self.model: Model | None = None
        self.worker: Worker | BatchWorker | None = None
        self.memory: SharedIndex | None = None
        self.chat: ChatPrompts | None = None  # chat messages to prompts, once the model is loaded
        self.load_error: str | None = None
        self.ready = threading.Event()
        self.on_fatal: Callable[[str], None] | None = None

    def start(self) -> None:
        threading.Thread(target=self._load, name="load-model", daemon=True).start()

    def _load(self) -> None:
        try:
            model = self.loader()
            if self.config.calibrate and self.config.draft.enabled and self.config.draft.adaptive:
                model.tuning.calibrate()
            if self.config.remembers:
                self.memory = SharedIndex(
                    model.drafting.tokenizer_id,
                    max_tokens=self.config.index_max_tokens,
                    max_requests=self.config.index_max_requests,
                    path=self.config.index_file,
                )
            parallel = self.config.parallel
            if parallel == 0:
                parallel = model.tuning.default_parallel()
                log.info("--parallel %d (from the measured cost curve)", parallel)
            if parallel > 1 and self.config.idle_tokens > 0:
                log.info("idle work (--idle-tokens) needs one slot: off with --parallel %d", parallel)
            if parallel > 1:
                self.worker = BatchWorker(
                    model, self.metrics, self.config.max_queue, parallel, self.config.draft, self.config.kv_unified
                )
            else:
                self.worker = Worker(model, self.metrics, self.config.max_queue)
            self.chat = ChatPrompts(model.backend, self.config.chat_template)
            self.model = model
            self.ready.set()
            log.info("model %s ready", self.config.model_id)
            self._start_grammar_checker(model)
        except Exception as exc:  # noqa: BLE001 - reported through /health and on_fatal
            self.load_error = str(exc) if isinstance(exc, LookaheadError) else repr(exc)
            log.error("could not load the model: %s", self.load_error)
            if self.on_fatal is not None:
                self.on_fatal(self.load_error)

    @staticmethod
    def _start_grammar_checker(model: Any) -> None:
        """The child process that checks requests' grammars, started now rather than by the
        first grammar (which would wait a second for it)."""
        grammars = getattr(model, "grammars", None)
        if grammars is None:
            return
        try:
            grammars.start()
        except LookaheadError as exc:
            log.warning("the grammar checker did not start (%s): requests with a grammar will wait for it", exc)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close(self.config.shutdown_timeout)
        if self.memory is not None:
            self.memory.close()
        if self.model is not None:
            self.model.close()
            self.model = None
