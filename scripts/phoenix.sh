#!/usr/bin/env bash
# Arize Phoenix (a real OpenTelemetry/OTLP trace backend) in its own venv, .venv-phoenix/
# (git-ignored), for the OTLP push test (tests/store/test_otlp_phoenix.py).
# `scripts/phoenix.sh` installs it if missing (idempotent) and prints the venv's python;
# `scripts/phoenix.sh serve DIR PORT GRPC_PORT` runs `phoenix serve` with its data in DIR,
# OTLP/HTTP and the REST API on 127.0.0.1:PORT.
# An install failure exits non-zero (the slow test must fail, not skip, without it).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
VENV=.venv-phoenix
SPEC=${PHOENIX_SPEC:-'arize-phoenix>=11'}
if [ ! -x "$VENV/bin/phoenix" ]; then
  echo "phoenix: installing $SPEC" >&2
  t0=$(date +%s)
  [ -x "$VENV/bin/python" ] || "$UV" venv -q --python python3.11 "$VENV"
  "$UV" pip install -q --python "$VENV/bin/python" "$SPEC"
  echo "phoenix: installed in $(( $(date +%s) - t0 )) s" >&2
fi
if [ "${1:-}" = serve ]; then
  export PHOENIX_WORKING_DIR="$2" PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$3"
  export PHOENIX_GRPC_PORT="$4" PHOENIX_TELEMETRY_ENABLED=false
  exec "$VENV/bin/phoenix" serve
fi
echo "$PWD/$VENV/bin/python"
