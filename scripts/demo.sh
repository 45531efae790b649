#!/usr/bin/env bash
# Set up (idempotent) and run the main job on the embedded defaults: the local 1.5B model as
# planner and continuous Full reviewer, the real MCP filesystem server, and a generated
# student-database task with 25 students. The run is recorded under runs/demo/ (a previous demo
# run there is replaced).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -e runs/demo ]; then
  echo "demo: replacing the previous run in runs/demo"
  rm -rf runs/demo
fi
exec .venv/bin/controlscope run --task student_database/english_talent --students 25 --seed 0 \
  --scope full --schedule continuous --model local --out runs/demo "$@"
