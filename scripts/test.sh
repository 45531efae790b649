#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: lint, types, tests (the real MCP server, the
# real local model, a real OpenAI-compatible server on loopback, real subprocesses).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
.venv/bin/python -m pytest -q -ra "$@"
