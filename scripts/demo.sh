#!/usr/bin/env bash
# Set up (idempotent) and run the main job on the embedded defaults: a small paired panel
# (scripts/demo.toml). Two tasks whose source programs are frozen fixtures
# (scripts/demo_programs/) that go wrong the way the paper's do: student records read one call
# at a time under a call budget that cannot finish them, and a paper moved to the wrong
# destination. Keep, Arg and Full run each program from the same state; under Arg and Full the
# local 1.5B model reviews once, at the boundary where the program goes wrong; then the report
# prints each paired difference with the decision that caused it. The panel is recorded under
# runs/demo/ (a previous demo there is replaced). Extra arguments go to `controlscope panel`
# (e.g. --workers 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -e runs/demo ]; then
  echo "demo: replacing the previous panel in runs/demo"
  rm -rf runs/demo
fi
.venv/bin/controlscope panel scripts/demo.toml --out runs/demo "$@"
exec .venv/bin/controlscope report runs/demo
