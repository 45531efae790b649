#!/usr/bin/env bash
# Re-record tests/fixtures/main_job: a real run of the README's main job (the student-database
# task "English-talent selection", 25 students, Full review) with the embedded 1.5B model.
# tests/test_run_cli.py replays it with `--model replay:` and expects the same verdict, calls and
# decisions. Re-record after changing anything that shapes model requests (the planner or
# reviewer prompts, views, operation schemas).
#
# The fixture must show what replays check: real primitive calls, and at least one realized
# patch or replacement with primitive calls after it. Source programs (the planner's sampling
# draw) are tried in order under the continuous schedule, then under every_boundary (which also
# reviews the first call), until a run does.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for schedule in continuous every_boundary; do
  for program in ${PROGRAMS:-0 1 2 3 4 5}; do
    args=(--task student_database/english_talent --students 25 --seed 0 --scope full
          --schedule "$schedule" --source-program "$program")
    run="$out/$schedule-$program"
    echo "record_fixture: $schedule, source program $program"
    .venv/bin/controlscope run "${args[@]}" --model local --quiet --out "$run" || true
    if .venv/bin/python - "$run" <<'PY'
import sys
from controlscope.record import read_events

events = read_events(sys.argv[1])
changed = [i for i, e in enumerate(events)
           if e.type == "realized_operation" and e.operation.kind != "keep"]
calls = [i for i, e in enumerate(events) if e.type == "primitive_call"]
sys.exit(0 if changed and any(c > changed[0] for c in calls) else 1)
PY
    then
      rm -rf tests/fixtures/main_job && mkdir -p tests/fixtures/main_job
      cp "$run/events.jsonl" "$run/summary.json" tests/fixtures/main_job/
      printf '{"args": [%s]}\n' "$(printf '"%s",' "${args[@]}" | sed 's/,$//')" \
        > tests/fixtures/main_job/command.json
      echo "recorded tests/fixtures/main_job ($schedule, source program $program)"
      exit 0
    fi
  done
done
echo "record_fixture: no run had a realized operation with calls after it" >&2
exit 1
