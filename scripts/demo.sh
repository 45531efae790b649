#!/usr/bin/env bash
# Set up (idempotent) and run the main job on the embedded defaults: a small paired panel
# (scripts/demo.toml). The local 1.5B model writes a source program for the student-database
# task "English-talent selection" (25 students), shared by Keep, Arg and Full; under Arg and
# Full the same model reviews every primitive call; then the report prints the paired result.
# The panel is recorded under runs/demo/ (a previous demo there is replaced). Extra arguments
# go to `controlscope panel` (e.g. --workers 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -e runs/demo ]; then
  echo "demo: replacing the previous panel in runs/demo"
  rm -rf runs/demo
fi
.venv/bin/controlscope panel scripts/demo.toml --out runs/demo "$@"
exec .venv/bin/controlscope report runs/demo
