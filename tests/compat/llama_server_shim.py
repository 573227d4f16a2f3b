"""Start `lookahead serve` where llama.cpp's server test suite starts `llama-server`.

The suite's `utils.py` runs the program named by LLAMA_SERVER_BIN_PATH with llama-server's
options; this reads the ones that describe the service (host, port, API key, context size,
slots, model alias, the request defaults `--temp`, `--seed` and `--n-predict`, CORS origins,
`--no-slots`, the chat template's `--chat-template`, `--chat-template-file` and, with
one of those, `--jinja` / `--no-jinja`) and starts `lookahead serve` with them on one model
for every test: LOOKAHEAD_COMPAT_MODEL (default: the default model, Qwen2.5-Coder-0.5B). The
model options (`--hf-repo`, `--model`, ...) and the rest (`--batch-size`, ...) are read and
left unused: the suite's models are not downloaded. A relative `--chat-template-file` is
read from the directory the suite started the launcher in (LOOKAHEAD_COMPAT_CALLER_DIR).

    python tests/compat/llama_server_shim.py --host 127.0.0.1 --port 8080 --ctx-size 512 ...
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def serve_args(argv: list[str]) -> list[str]:
    """`lookahead serve`'s arguments for llama-server's `argv`."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--api-key")
    p.add_argument("--ctx-size", "-c", type=int, default=0)
    p.add_argument("--parallel", "-np", type=int, default=1)
    p.add_argument("--threads", "-t", type=int, default=0)
    p.add_argument("--alias", "-a")
    p.add_argument("--temp")
    p.add_argument("--seed", "-s")
    p.add_argument("--n-predict", "-n")
    # llama-server's default is any origin; lookahead's is pages on this machine: given as
    # llama-server reads it, so the suite tests the service it thinks it started
    p.add_argument("--cors-origins", default="*")
    p.add_argument("--tags")
    p.add_argument("--slots", action="store_true")
    p.add_argument("--no-slots", action="store_true")
    p.add_argument("--chat-template")
    p.add_argument("--chat-template-file")
    p.add_argument("--jinja", action="store_true", default=None)
    p.add_argument("--no-jinja", dest="jinja", action="store_false")
    known, _ = p.parse_known_args(argv)
    args = [
        "serve",
        "--model",
        os.environ.get("LOOKAHEAD_COMPAT_MODEL", DEFAULT_MODEL),
        "--host",
        known.host,
        "--port",
        str(known.port),
        "--parallel",
        str(max(1, known.parallel)),
        "--threads",
        os.environ.get("LOOKAHEAD_COMPAT_THREADS", str(known.threads)),
    ]
    if known.ctx_size:
        args += ["--n-ctx", str(known.ctx_size)]
    if known.api_key:
        args += ["--api-key", known.api_key]
    for flag, value in (
        ("--alias", known.alias),
        ("--temp", known.temp),
        ("--seed", known.seed),
        ("--n-predict", known.n_predict),
        ("--cors-origins", known.cors_origins),
        ("--tags", known.tags),
    ):
        if value is not None:
            args += [flag, value]
    if known.chat_template is not None:
        args += ["--chat-template", known.chat_template]
    if known.chat_template_file is not None:
        caller = Path(os.environ.get("LOOKAHEAD_COMPAT_CALLER_DIR", "."))
        args += ["--chat-template-file", str(caller / known.chat_template_file)]
    if known.jinja is not None and (known.chat_template is not None or known.chat_template_file is not None):
        args.append("--jinja" if known.jinja else "--no-jinja")  # it only says how a template is read
    if known.no_slots and not known.slots:
        args.append("--no-slots")
    return args


def main() -> None:
    args = serve_args(sys.argv[1:])
    print("lookahead " + " ".join(args), flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "lookahead.cli.main", *args])


if __name__ == "__main__":
    main()
