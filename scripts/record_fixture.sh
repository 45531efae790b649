#!/usr/bin/env bash
# Re-record tests/fixtures/main_job: a real run of the README's main job with the embedded 1.5B
# model. tests/test_run_cli.py replays it with `--model replay:` and expects the same verdict,
# calls and decisions. Re-record after changing anything that shapes model requests (the planner
# or reviewer prompts, views, operation schemas).
set -euo pipefail
cd "$(dirname "$0")/.."
args=(--task student_database/english_talent --students 25 --seed 0 --scope full
      --schedule continuous)
out=$(mktemp -d)
.venv/bin/controlscope run "${args[@]}" --model local --quiet --out "$out/run"
rm -rf tests/fixtures/main_job && mkdir -p tests/fixtures/main_job
cp "$out/run/events.jsonl" "$out/run/summary.json" tests/fixtures/main_job/
printf '{"args": [%s]}\n' "$(printf '"%s",' "${args[@]}" | sed 's/,$//')" \
  > tests/fixtures/main_job/command.json
rm -rf "$out"
echo "recorded tests/fixtures/main_job"
