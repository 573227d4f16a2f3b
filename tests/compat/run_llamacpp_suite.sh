#!/usr/bin/env bash
# Run llama.cpp's own server test suite against `lookahead serve`, as a user checking that
# a llama-server client works with it would: the suite's tests, unchanged, from the sdist of
# the llama-cpp-python this project pins (it vendors llama.cpp), with its own requirements in
# a venv of their own, and `tests/compat/llama_server_shim.py` started where it starts
# llama-server.
#
#   tests/compat/run_llamacpp_suite.sh                    # the six files below
#   tests/compat/run_llamacpp_suite.sh unit/test_infill.py unit/test_security.py -x
#
# LOOKAHEAD_COMPAT_MODEL names the model every test runs on (default qwen2.5-coder-0.5b);
# LLAMACPP_SUITE_DIR where the suite and its venv are kept (default .llamacpp-suite/).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${LOOKAHEAD_PYTHON:-$ROOT/.venv/bin/python}"
WORK="${LLAMACPP_SUITE_DIR:-$ROOT/.llamacpp-suite}"
VERSION="$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
mkdir -p "$WORK/bin"

if [ ! -f "$WORK/tests/utils.py" ]; then
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK/sdist"
    tar -xzf "$WORK/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$WORK" \
        "llama_cpp_python-$VERSION/vendor/llama.cpp/tools/server/tests"
    mv "$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp/tools/server/tests" "$WORK/tests"
    rm -rf "$WORK/llama_cpp_python-$VERSION"
fi
if [ ! -x "$WORK/venv/bin/python" ]; then
    python3 -m venv "$WORK/venv"
    "$WORK/venv/bin/python" -m pip install --quiet -r "$WORK/tests/requirements.txt"
fi
cat > "$WORK/bin/llama-server" <<SHIM
#!/bin/sh
cd "$ROOT" && exec "$PY" "$ROOT/tests/compat/llama_server_shim.py" "\$@"
SHIM
chmod +x "$WORK/bin/llama-server"

if [ "$#" -eq 0 ]; then
    set -- unit/test_basic.py unit/test_infill.py unit/test_completion.py \
        unit/test_chat_completion.py unit/test_security.py unit/test_stream.py
fi
cd "$WORK/tests"
LLAMA_SERVER_BIN_PATH="$WORK/bin/llama-server" exec "$WORK/venv/bin/python" -m pytest -p no:cacheprovider -q -rf "$@"
