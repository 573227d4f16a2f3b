"""Start a real `llama-server` binary where llama.cpp's server test suite starts it, on the
same model file `lookahead serve` runs in the other target, so the two pass counts compare.

The suite's options pass through unchanged except the ones that choose a model (`--hf-repo`,
`--hf-file`, `--model`, `--model-url`, ...): they are replaced by `--model FILE`, the GGUF
file of LOOKAHEAD_COMPAT_MODEL (default: the default model, Qwen2.5-Coder-0.5B), so nothing is
downloaded. Extra buffer types can be turned off with LOOKAHEAD_COMPAT_NO_REPACK=1 (some CPUs
need it, see the project's field notes).

    python tests/compat/real_llama_server.py /path/to/llama-server --port 8080 --hf-repo x ...
"""

from __future__ import annotations

import os
import sys

# llama-server's options that choose the model (or a second one), each followed by a value
MODEL_OPTIONS = {
    "-m",
    "--model",
    "-mu",
    "--model-url",
    "-hf",
    "-hfr",
    "--hf-repo",
    "-hff",
    "--hf-file",
    "-md",
    "--model-draft",
    "-hfd",
    "-hfrd",
    "--hf-repo-draft",
    "--mmproj-url",
    "-mmu",
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def server_args(argv: list[str], model_file: str) -> list[str]:
    """llama-server's arguments: `argv` without its model options, then `--model model_file`."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in MODEL_OPTIONS:
            skip = "=" not in arg
            continue
        out.append(arg)
    return [*out, "--model", model_file]


def model_file(name: str) -> str:
    """The GGUF file of a model name or path, as `lookahead serve` would find it."""
    from lookahead.api import locate
    from lookahead.models.catalog import default_cache_dir

    return str(locate(name, default_cache_dir()))


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: real_llama_server.py LLAMA_SERVER_BINARY [llama-server options]")
    binary = sys.argv[1]
    args = server_args(sys.argv[2:], model_file(os.environ.get("LOOKAHEAD_COMPAT_MODEL", DEFAULT_MODEL)))
    if os.environ.get("LOOKAHEAD_COMPAT_NO_REPACK") == "1":
        args.append("--no-repack")
    threads = os.environ.get("LOOKAHEAD_COMPAT_THREADS")
    if threads and "--threads" not in args and "-t" not in args:
        args += ["--threads", threads]
    print(binary + " " + " ".join(args), flush=True)
    os.execv(binary, [binary, *args])


if __name__ == "__main__":
    main()
