"""The log's schema version moves with the schema: a log that may hold a field or a value added
after version 7 (how a block was extracted, who proposed, a person's timeout, a response too
large) is written under a newer version, so a version-7 reader refuses it by its version; and
logs of version 7 and older still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from controlscope import core
from controlscope.record import read_events
from controlscope.replay import Recording

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"


def test_events_with_fields_added_after_version_7_are_written_under_a_newer_version() -> None:
    event = core.BlockStartEvent(seq=0, block_id="b0", code="print(1)", extracted="text")
    written = json.loads(event.model_dump_json())
    assert written["extracted"] == "text" and written["schema_version"] > 7
    assert written["schema_version"] == core.SCHEMA_VERSION
    assert "response_too_large" in core.ProviderErrorKind.__args__  # a value added since 7


def test_an_older_log_still_reads_and_replays(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    first = json.loads((run / core.EVENTS_FILE).read_text().splitlines()[0])
    assert first["schema_version"] <= 7  # the committed fixture was written under an older one
    events = read_events(run)
    assert events and all(e.schema_version == core.SCHEMA_VERSION for e in events)
    assert Recording.load(run).run_dir == run
