#!/usr/bin/env bash
# Real peer clients of an OpenAI/vLLM server, each in its own venv (git-ignored):
#   .venv-peers/guidellm   PyPI guidellm 0.8.x   (bin/guidellm)
#   .venv-peers/aiperf     PyPI aiperf 0.13.x    (bin/aiperf)
#   .venv-peers/tokenizer  a local Hugging Face tokenizer directory with the Llama-3
#                          vocabulary sim/vllm-3b counts prompts with (scripts/llama3_tokenizer.py),
#                          for `--tokenizer kind=hf_auto,model=DIR` (guidellm) / `--tokenizer DIR`
#                          (aiperf): the hub is unreachable here.
# `scripts/peer_tools.sh` installs what is missing (idempotent) and prints the three paths;
# `scripts/peer_tools.sh CMD...` then runs CMD with GUIDELLM, AIPERF and PEER_TOKENIZER set.
# Any install failure exits non-zero (the slow test must fail, not skip, without them).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
ROOT=.venv-peers
GUIDELLM_SPEC=${GUIDELLM_SPEC:-'guidellm>=0.8,<0.9'}
AIPERF_SPEC=${AIPERF_SPEC:-'aiperf>=0.13,<0.14'}
mkdir -p "$ROOT"

install() {  # install NAME SPEC...: its own venv, once
  local name=$1; shift
  local py="$ROOT/$name/bin/python"
  if [ -x "$ROOT/$name/bin/$name" ]; then return; fi
  echo "peer-tools: installing $name ($*)" >&2
  local t0; t0=$(date +%s)
  [ -x "$py" ] || "$UV" venv -q --python python3.11 "$ROOT/$name"
  # guidellm requires torch (any version): from PyPI that is a CUDA build (~5 GB of venv).
  # Where the machine keeps a CPU wheel in pip's find-links folder, install that one first;
  # the requirement is then met and nothing else is fetched.
  local cpu_torch
  cpu_torch=$(ls "${PIP_FIND_LINKS:-/opt/wheels}"/torch-*+cpu-cp311-*.whl 2>/dev/null | head -1 || true)
  if [ "$name" = guidellm ] && [ -n "$cpu_torch" ]; then
    "$UV" pip install -q --python "$py" "$cpu_torch"
  fi
  "$UV" pip install -q --python "$py" "$@"
  echo "peer-tools: $name installed in $(( $(date +%s) - t0 )) s" >&2
}

install guidellm "$GUIDELLM_SPEC"
install aiperf "$AIPERF_SPEC"

# The tokenizer directory: sim/vllm-3b's exact Llama-3 vocabulary (agentlab.llm.tokens,
# from the quicktok-v1 wheel) exported as a Hugging Face tokenizer, checked against
# agentlab's own counts; so client and server count a prompt alike.
if [ ! -f "$ROOT/tokenizer/tokenizer.json" ]; then
  .venv/bin/python scripts/llama3_tokenizer.py "$ROOT/tokenizer" --check >/dev/null
fi

export GUIDELLM="$PWD/$ROOT/guidellm/bin/guidellm"
export AIPERF="$PWD/$ROOT/aiperf/bin/aiperf"
export PEER_TOKENIZER="$PWD/$ROOT/tokenizer"
if [ $# -eq 0 ]; then
  printf 'GUIDELLM=%s\nAIPERF=%s\nPEER_TOKENIZER=%s\n' "$GUIDELLM" "$AIPERF" "$PEER_TOKENIZER"
else
  exec "$@"
fi
