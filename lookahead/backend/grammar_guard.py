"""Grammars from strangers, parsed where llama.cpp's parser cannot hurt the process.

llama.cpp's grammar parser can take the process down or hold it: it recurses once per
nested group (tens of thousands of groups overflow the stack: SIGSEGV), and its left-
recursion check is exponential in rules such as `a0 ::= a1 | a1`, `a1 ::= a2 | a2`, ...
(60 of them never finish). Neither can be caught in the process that runs the parse.

So `GrammarParser.parse(text)` asks a `GrammarChecker` first: a child process that holds the
model's vocabulary (`vocab_only`: the parser needs it for token literals such as
`<|im_end|>`) and parses each grammar with a time limit. Its verdict is "fine", the parser's
own error, "too complex" (no verdict in time: the child is killed) or "crashed the parser"
(the child died); only a grammar the child accepted is parsed again here, in a thread with
a bigger stack than the child's (what fitted there fits here). Verdicts and parsed grammars
are kept in small LRU caches keyed by the grammar's hash, so a repeated schema costs nothing.

The child is started on first use (or by `start()`) and restarted after a kill; it ends
when its pipe closes (this process is gone) and, when a parse outlives the limit, by itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import llama_cpp as ll

from lookahead.backend.grammar import Grammar, GrammarError
from lookahead.backend.llama import LlamaVocab
from lookahead.errors import LookaheadError

T = TypeVar("T")

CHECK_STACK = 8 << 20  # the child's parse runs in a thread with this stack...
PARSE_STACK = 64 << 20  # ...and ours in one with this (address space only, until touched)
CHECK_MEMORY = 4 << 30  # the child's address space limit: a parse that allocates more fails there
TOO_COMPLEX = "the grammar is too complex: llama.cpp's parser did not finish it within {:g} s"
CRASHED = "the grammar crashed llama.cpp's parser"
_HEADER = struct.Struct(">I")


class CheckerUnavailable(LookaheadError):
    """The checker cannot answer now (it does not start, or others' checks hold it): not
    the grammar's fault, so not a GrammarError."""


class GrammarChecker:
    """A child process that parses grammars for one model's vocabulary, one at a time, each
    within `limit_s` seconds; `check(text)` is None for a grammar that parses, else why not."""

    def __init__(self, model_path: str | Path, limit_s: float = 2.0, start_s: float = 60.0,
                 wait_s: float = 10.0, cache: int = 256) -> None:
        self.model_path = str(model_path)
        self.limit_s = limit_s
        self.start_s = start_s  # for the child to import llama.cpp and read the vocabulary
        self.wait_s = wait_s  # at most, behind other requests' checks
        self._verdicts: OrderedDict[bytes, str | None] = OrderedDict()
        self._cache = cache
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0  # children killed or dead (tests and logs)

    def check(self, text: str, root: str = "root") -> str | None:
        key = hashlib.sha256(f"{root}\0{text}".encode("utf-8", "surrogatepass")).digest()
        if not self._lock.acquire(timeout=self.wait_s):
            raise CheckerUnavailable("the grammar checker is busy with other requests' grammars: try again")
        try:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
            verdict = self._ask({"text": text, "root": root})
            self._verdicts[key] = verdict
            if len(self._verdicts) > self._cache:
                self._verdicts.popitem(last=False)
            return verdict
        finally:
            self._lock.release()

    def start(self) -> None:
        """Start the child now (it starts on the first check otherwise)."""
        with self._lock:
            self._started()

    def close(self) -> None:
        with self._lock:
            self._stop()

    # ---- the child, from this side ------------------------------------------------------
    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "lookahead.backend.grammar_guard", self.model_path, str(self.limit_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
        self._proc = proc
        try:
            hello = _receive(proc, time.monotonic() + self.start_s)
        except (TimeoutError, EOFError) as exc:
            self._stop()
            raise CheckerUnavailable(f"the grammar checker did not start ({type(exc).__name__})") from exc
        if "error" in hello:
            self._stop()
            raise CheckerUnavailable(f"the grammar checker did not start: {hello['error']}")
        return proc

    def _ask(self, request: dict[str, str]) -> str | None:
        proc = self._started()
        try:
            assert proc.stdin is not None
            payload = json.dumps(request).encode()
            proc.stdin.write(_HEADER.pack(len(payload)) + payload)
            proc.stdin.flush()
            answer = _receive(proc, time.monotonic() + self.limit_s + 1.0)
        except TimeoutError:
            self._stop()
            return TOO_COMPLEX.format(self.limit_s)
        except (EOFError, OSError):  # it died: a crash in the parser (or killed by its limits)
            self._stop()
            return CRASHED
        if answer.get("ok"):
            return None
        if answer.get("timeout"):
            self._stop()  # its parse is still running: the child exits, make sure of it
        return str(answer.get("error") or CRASHED)

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            self.restarts += 1
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _receive(proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    size = _HEADER.unpack(_read(fd, _HEADER.size, deadline))[0]
    answer: dict[str, Any] = json.loads(_read(fd, size, deadline))
    return answer


def _read(fd: int, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class GrammarParser:
    """Grammars for one model, parsed only once `checker` accepted them (see the module's
    docstring); the parsed ones are cached and shared (each generation gets its own state)."""

    def __init__(self, vocab: LlamaVocab, checker: GrammarChecker | None = None, cache: int = 32) -> None:
        self._vocab = vocab
        self._checker = checker
        self._grammars: OrderedDict[bytes, Grammar] = OrderedDict()
        self._cache = cache
        self._lock = threading.Lock()

    @property
    def checker(self) -> GrammarChecker:
        with self._lock:
            if self._checker is None:
                self._checker = GrammarChecker(self._vocab.path)
            return self._checker

    def parse(self, text: str, root: str = "root") -> Grammar:
        """The grammar `text`; GrammarError for one that does not parse, is too complex or
        crashed the checker's parser; CheckerUnavailable when no check can be made now."""
        if not text.strip():
            raise GrammarError("the grammar is empty")
        try:
            raw = text.encode("utf-8"), root.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise GrammarError(f"the grammar is not valid Unicode text: {exc.reason}") from exc
        key = hashlib.sha256(f"{root}\0{text}".encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            found = self._grammars.get(key)
            if found is not None:
                self._grammars.move_to_end(key)
                return found
        refused = self.checker.check(text, root)
        if refused is not None:
            raise GrammarError(refused)
        smpl = _with_stack(PARSE_STACK, lambda: ll.llama_sampler_init_grammar(self._vocab._vocab, *raw))
        if not smpl:  # the child parsed it with the same llama.cpp: not expected
            raise GrammarError("llama.cpp could not parse the grammar")
        grammar = Grammar.from_sampler(self._vocab, smpl)
        with self._lock:
            self._grammars[key] = grammar
            if len(self._grammars) > self._cache:
                self._grammars.popitem(last=False)  # freed once no request holds it
        return grammar

    def start(self) -> None:
        """Start the checker now, so the first grammar does not wait for it."""
        self.checker.start()

    def close(self) -> None:
        if self._checker is not None:
            self._checker.close()
        with self._lock:
            self._grammars.clear()


_stack_lock = threading.Lock()


def _with_stack(size: int, fn: Callable[[], T]) -> T:
    """`fn()` in a thread of its own with a `size`-byte stack (its result or its exception)."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            failed.append(exc)

    with _stack_lock:  # the size is process-wide: set it just for this thread's start
        previous = threading.stack_size(size)
        try:
            thread = threading.Thread(target=run, name="grammar-parse", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if failed:
        raise failed[0]
    return out[0]


# ---- the child ------------------------------------------------------------------------------


def _child(path: str, limit_s: float) -> int:
    """Answer parse requests on stdin until it closes (see `GrammarChecker`)."""
    with contextlib.suppress(ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CHECK_MEMORY, CHECK_MEMORY))
    out = os.fdopen(os.dup(1), "wb")  # replies go here; llama.cpp's prints go to stderr
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    try:
        vocab = LlamaVocab(path, vocab_only=True)
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        _send(out, {"error": str(exc)})
        return 1
    _send(out, {"ready": True})
    while True:
        head = stdin.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return 0  # the parent closed the pipe: it is gone or done
        request = json.loads(stdin.read(_HEADER.unpack(head)[0]))
        answer: dict[str, Any] = {}

        def parse(req: dict[str, Any] = request, ans: dict[str, Any] = answer) -> None:
            try:
                Grammar(vocab, req["text"], req["root"]).close()
                ans["ok"] = True
            except Exception as exc:  # noqa: BLE001 - a GrammarError, or what a bad request raises
                ans["error"] = str(exc) or type(exc).__name__

        previous = threading.stack_size(CHECK_STACK)
        worker = threading.Thread(target=parse, daemon=True)
        worker.start()
        threading.stack_size(previous)
        worker.join(limit_s)
        if worker.is_alive():  # no way to stop it: say so, and end the process with it
            _send(out, {"timeout": True, "error": TOO_COMPLEX.format(limit_s)})
            os._exit(3)
        _send(out, answer)


def _send(out: IO[bytes], message: dict[str, Any]) -> None:
    payload = json.dumps(message).encode()
    out.write(_HEADER.pack(len(payload)) + payload)
    out.flush()


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], float(sys.argv[2])))
