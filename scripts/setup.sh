#!/usr/bin/env bash
# Set up a development checkout from nothing: bubblewrap, Chromium (the viewer's browser tests),
# the Python venv with controlscope installed editable (with the embedded local model runtime,
# Ray for distributed panels: a 79 MB wheel that installs in about 12 s, and ALFWorld's text
# engine, whose fast-downward dependency compiles from source: about 2 CPU-minutes, 280 MB with
# spaCy; the framework adapters' smolagents, OpenAI Agents SDK and Pydantic AI: about 70 MB, 10 s),
# the pinned MCP filesystem server, and the embedded model's weights; then check that
# llama.cpp decodes on this CPU. Idempotent: a second run reinstalls quickly from caches,
# re-checks the weights and the runtime.
#
# llama.cpp is compiled for this CPU without its AMX kernels (scripts/llama_cmake_args.py says
# why); CMAKE_ARGS in the environment overrides that for the first build. If the installed
# runtime crashes anyway (e.g. a wheel pip cached on another CPU), pip's cached builds of it are
# dropped, it is rebuilt from source with the safe options and checked again; setup fails rather
# than leave a runtime that crashes.
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

# The viewer's browser tests drive Debian's Chromium (playwright never downloads a browser here).
if [ "$(uname -s)" = "Linux" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (the viewer's browser tests; about a minute)"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
  else
    echo "setup: chromium is missing; the viewer's browser tests will fail" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

SAFE_CMAKE_ARGS="$(python3 scripts/llama_cmake_args.py)"
LLAMA_PIN="$(grep -o 'llama-cpp-python[^"]*==[0-9.]*' pyproject.toml | sed 's/\[[a-z,]*\]//')"
echo "setup: installing controlscope and its dependencies (the first time builds llama.cpp and"
echo "setup: ALFWorld's planner library fast-downward: minutes)"
# One resolution of every extra: the embedded model, tests, Ray, ALFWorld, the three framework
# adapters, OpenTelemetry traces (SDK, OTLP/HTTP exporter), Inspect AI logs (and pyarrow)
EXTRAS="local,dev,ray,alfworld,smolagents,openai-agents,pydantic-ai,otel,inspect"
CMAKE_ARGS="${CMAKE_ARGS:-$SAFE_CMAKE_ARGS}" .venv/bin/python -m pip install -q -e ".[$EXTRAS]"

echo "setup: installing the pinned MCP filesystem server"
npm ci --no-audit --no-fund --silent

echo "setup: fetching the embedded model (checked by SHA-256)"
.venv/bin/controlscope model pull --model 1.5b
.venv/bin/controlscope model pull --model 0.5b

# Decode a few tokens in a child process. Exit status 3: it crashed or hung; 4: it uses AMX
# kernels on an AMX CPU; 1: something else (not fixed by a rebuild).
check_runtime() {
  local status=0
  RUNTIME_LINE="$(.venv/bin/python -m controlscope.models._runtime_check --model 0.5b \
    2>.venv/runtime-check.log)" || status=$?
  return "$status"
}

echo "setup: checking that llama.cpp decodes on this CPU"
status=0
check_runtime || status=$?
if [ "$status" = 3 ] || [ "$status" = 4 ]; then
  echo "setup: $RUNTIME_LINE: the build does not suit this CPU; rebuilding $LLAMA_PIN from" \
    "source for it without AMX (CMAKE_ARGS=\"$SAFE_CMAKE_ARGS\"; about 5 minutes on 2 cores)"
  # pip reuses a wheel it built before whatever CMAKE_ARGS says: drop those, build afresh
  .venv/bin/python -m pip cache remove llama_cpp_python >/dev/null 2>&1 || true
  CMAKE_ARGS="$SAFE_CMAKE_ARGS" .venv/bin/python -m pip install -q --no-cache-dir \
    --force-reinstall --no-deps --no-binary llama-cpp-python "$LLAMA_PIN"
  status=0
  check_runtime || status=$?
fi
if [ "$status" != 0 ]; then
  echo "setup: FAILED: $RUNTIME_LINE" >&2
  cat .venv/runtime-check.log >&2
  exit 1
fi
echo "setup: $RUNTIME_LINE"
