#!/usr/bin/env bash
# Set up a development checkout from nothing: bubblewrap, the Python venv with controlscope
# installed editable (with the embedded local model runtime), the pinned MCP filesystem server,
# and the embedded model's weights. Idempotent: a second run reinstalls quickly from caches and
# re-checks the weights.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -s)" = "Linux" ] && ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing bubblewrap"
    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: bubblewrap (bwrap) is missing; agent code will run without isolation" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
echo "setup: installing controlscope and its dependencies (the first time builds llama.cpp: minutes)"
.venv/bin/python -m pip install -q -e '.[local,dev]'

echo "setup: installing the pinned MCP filesystem server"
npm ci --no-audit --no-fund --silent

echo "setup: fetching the embedded model (checked by SHA-256)"
.venv/bin/controlscope model pull --model 1.5b
.venv/bin/controlscope model pull --model 0.5b
