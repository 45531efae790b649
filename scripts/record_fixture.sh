#!/usr/bin/env bash
# Re-record tests/fixtures/main_job: a real run of the README's single-run job (the student-database
# task "English-talent selection", 25 students, Full review) with the embedded 1.5B model.
# tests/test_run_cli.py replays it with `--model replay:` and expects the same verdict, calls and
# decisions. Re-record after changing anything that shapes model requests (the planner or
# reviewer prompts, views, operation schemas).
#
# The fixture must show what replays check: real primitive calls, and a reviewed boundary where the
# reviewer proposed more than `keep` (a patch or replacement, realized or rejected). Source programs
# (the planner's sampling draw) are tried in order under every_boundary (which also reviews the
# first call: the 1.5B planner's programs often make a single call), then continuous; the first run
# that qualifies is kept. A budget of 4 planning turns (MAX_TURNS) keeps the recording short: the
# 1.5B planner can spend all 100 default turns re-running a failing block.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
kept=""
for schedule in ${SCHEDULES:-every_boundary continuous}; do
  for program in ${PROGRAMS:-0 1 2 3 4 5}; do
    args=(--task student_database/english_talent --students 25 --seed 0 --scope full
          --schedule "$schedule" --source-program "$program" --max-turns "${MAX_TURNS:-4}")
    run="$out/$schedule-$program"
    echo "record_fixture: $schedule, source program $program"
    .venv/bin/controlscope run "${args[@]}" --model local --quiet --out "$run" || true
    printf '{"args": [%s]}\n' "$(printf '"%s",' "${args[@]}" | sed 's/,$//')" > "$run/command.json"
    if .venv/bin/python - "$run" <<'PY'
import sys
from controlscope.record import read_events

events = read_events(sys.argv[1])
calls = [i for i, e in enumerate(events) if e.type == "primitive_call"]
proposed = [e for e in events
            if e.type == "proposal" and e.operation is not None and e.operation.kind != "keep"]
sys.exit(0 if calls and proposed else 1)
PY
    then
      kept="$run"
      break 2
    fi
  done
done
if [ -z "$kept" ]; then
  echo "record_fixture: no run had primitive calls and a reviewer's patch or replacement" >&2
  exit 1
fi
rm -rf tests/fixtures/main_job && mkdir -p tests/fixtures/main_job
cp "$kept/events.jsonl" "$kept/summary.json" "$kept/command.json" tests/fixtures/main_job/
echo "recorded tests/fixtures/main_job from $(basename "$kept")"
