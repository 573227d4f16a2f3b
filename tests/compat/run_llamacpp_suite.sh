#!/usr/bin/env bash
# Run llama.cpp's own server test suite against `lookahead serve`, or against a real
# llama-server on the same model, as a user checking that a llama-server client works with
# it would: the suite's tests, unchanged, from the sdist of the llama-cpp-python this project
# pins (it vendors llama.cpp), with its own requirements in a venv of their own.
#
#   tests/compat/run_llamacpp_suite.sh                                  # the six files below
#   tests/compat/run_llamacpp_suite.sh unit/test_infill.py unit/test_security.py -x
#   tests/compat/run_llamacpp_suite.sh --target llama-server=/path/to/llama-server
#   tests/compat/run_llamacpp_suite.sh --junit out.xml                  # per-test results
#
# --target lookahead (the default) starts tests/compat/llama_server_shim.py where the suite
# starts llama-server; --target llama-server=PATH starts that binary through
# tests/compat/real_llama_server.py (the suite's flags, the model options replaced by the
# one model file). PORT (the suite's) sets the port its servers listen on (default 8080), so
# two runs can go side by side. LOOKAHEAD_COMPAT_MODEL names the model every test runs on (default
# qwen2.5-coder-0.5b); LLAMACPP_SUITE_DIR where the suite and its venv are kept (default
# .llamacpp-suite/). bench/llamacpp_suite_compare.py compares two --junit files.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${LOOKAHEAD_PYTHON:-$ROOT/.venv/bin/python}"
WORK="${LLAMACPP_SUITE_DIR:-$ROOT/.llamacpp-suite}"
TARGET=lookahead
JUNIT=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --target) TARGET="$2"; shift 2 ;;
        --target=*) TARGET="${1#--target=}"; shift ;;
        --junit) JUNIT="$2"; shift 2 ;;
        --junit=*) JUNIT="${1#--junit=}"; shift ;;
        *) break ;;
    esac
done
case "$TARGET" in
    lookahead) LAUNCH="\"$PY\" \"$ROOT/tests/compat/llama_server_shim.py\""; TARGET_NAME=lookahead ;;
    llama-server=*)
        SERVER="$(realpath "${TARGET#llama-server=}")"
        [ -x "$SERVER" ] || { echo "error: $SERVER is not an executable llama-server" >&2; exit 2; }
        LAUNCH="\"$PY\" \"$ROOT/tests/compat/real_llama_server.py\" \"$SERVER\""; TARGET_NAME=llama-server ;;
    *) echo "error: --target must be lookahead or llama-server=PATH, got $TARGET" >&2; exit 2 ;;
esac
VERSION="$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
# each run its own launcher, so runs from two checkouts (or targets) do not overwrite it
mkdir -p "$WORK/targets"
BIN="$(mktemp -d "$WORK/targets/$TARGET_NAME.XXXXXX")"

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
cat > "$BIN/llama-server" <<SHIM
#!/bin/sh
LOOKAHEAD_COMPAT_CALLER_DIR="\$PWD"; export LOOKAHEAD_COMPAT_CALLER_DIR
cd "$ROOT" && exec $LAUNCH "\$@"
SHIM
chmod +x "$BIN/llama-server"

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- unit/test_basic.py unit/test_infill.py unit/test_completion.py \
        unit/test_chat_completion.py unit/test_security.py unit/test_stream.py "$@"
fi
if [ -n "$JUNIT" ]; then
    JUNIT="$(realpath -m "$JUNIT")"
    set -- "$@" "--junitxml=$JUNIT"
fi
cd "$WORK/tests"
LLAMA_SERVER_BIN_PATH="$BIN/llama-server" exec "$WORK/venv/bin/python" -m pytest -p no:cacheprovider -q -rf "$@"
