"""A run directory, an executor's session or a panel folder as one Inspect AI eval log.

A panel is one log whose samples are its runs, the condition and the unit's pairing keys in
each sample's metadata (see ``docs/architecture.md``, "Export to Inspect AI", for why one log
rather than one per condition).
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from controlscope._extras import require_extra
from controlscope.export._runs import ExportError, FoundRuns, find_runs

FORMATS = (".eval", ".json")
"""The file suffixes of Inspect's two log formats (``.eval``: its compressed one)."""


def export_inspect(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write the runs of a run directory, an executor's session or a panel folder as one
    Inspect AI eval log (one sample per run; ``inspect view`` and ``inspect_ai.analysis``
    read it).

    Args:
        path: a run directory (``events.jsonl``), an executor's session (the same) or a panel
            folder (``panel.json``); a panel's runs that left no log, or one that cannot be
            read, are named in the log's metadata (``not_exported``, with why).
        out: the log file to write: ``.eval`` (Inspect's compressed format) or ``.json``; an
            existing file is replaced.

    Returns:
        ``out`` as a path.

    Raises:
        MissingExtra: the ``inspect`` extra (``inspect_ai``) is not installed.
        ExportError: ``path`` is neither kind of folder, a lone run's log cannot be read,
            ``out`` has another suffix, is a file of the folder exported (not an earlier
            export) or cannot be written (one line each).
    """
    require_extra("inspect", "inspect_ai", "the Inspect AI export")
    target = Path(out)
    if target.suffix not in FORMATS:
        raise ExportError(f"{target}: the log's name must end in .eval or .json")
    if target.is_dir():
        raise ExportError(f"{target} is a directory; name the log file to write")
    found = find_runs(Path(path))
    _refuse_own_file(Path(path), target)
    from inspect_ai.log import write_eval_log

    with _no_cycle_collection():
        log = build_log(found)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_eval_log(log, str(target))
        except OSError as err:
            raise ExportError(f"cannot write {target}: {err}") from None
    return target


def _refuse_own_file(folder: Path, target: Path) -> None:
    """Refuse to replace a file the exported folder already holds that is not an earlier
    export (a run's ``summary.json``, a panel's ``panel.json``, a log): writing would lose it.

    Raises:
        ExportError: ``target`` is such a file.
    """
    if not target.is_file() or not target.resolve().is_relative_to(folder.resolve()):
        return
    with target.open("rb") as handle:
        head = handle.read(64)
    inspect_log = head.startswith(b"PK") or (b'"version"' in head and b'"status"' in head)
    if not inspect_log:
        raise ExportError(
            f"{target} is a file of the folder being exported, not an earlier export; "
            "write the log elsewhere"
        )


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused while the log is built and written: the export makes
    millions of objects and keeps them (every sample until the log is written), so each of the
    collector's passes walks more of them, for almost nothing freed (the samples hold no
    cycles); this costs about a sixth of a panel's export. Reference counting still frees
    everything; the collector runs again afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build_log(found: FoundRuns) -> Any:
    """The eval log (``inspect_ai.log.EvalLog``) of the runs found."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalPlan, EvalSpec, EvalStats

    from controlscope.export._sample import SampleBuilder, read_run

    samples = []
    missing = dict(found.missing)
    for directory, planned in found.runs:
        try:
            events = read_run(directory)
        except ExportError as err:
            if planned is None:  # a lone run: nothing else to export
                raise
            missing[planned.id] = str(err)  # a panel's other runs are still exported
            continue
        sample_id = planned.id if planned is not None else directory.resolve().name
        samples.append(SampleBuilder(events, planned, sample_id).sample())
    started = min((s.started_at for s in samples if s.started_at), default="")
    completed = max((s.completed_at for s in samples if s.completed_at), default="")
    first = samples[0].metadata.get("models", {}) if samples else {}
    spec = EvalSpec(
        eval_id=uuid.uuid4().hex,
        run_id=uuid.uuid4().hex,
        created=started or _now(),
        task=found.name,
        task_id=found.name,
        solver="controlscope",
        dataset=EvalDataset(
            name=found.name, samples=len(samples), sample_ids=[str(s.id) for s in samples]
        ),
        model=first.get("planner", "unknown"),
        config=EvalConfig(),
        packages=_packages(),
        metadata={"panel": found.panel, "not_exported": missing},
    )
    return EvalLog(
        status="success",
        eval=spec,
        plan=EvalPlan(name="controlscope"),
        results=_results(samples),
        stats=EvalStats(
            started_at=started,
            completed_at=completed,
            model_usage=_summed(s.model_usage for s in samples),
            role_usage=_summed(s.role_usage for s in samples),
        ),
        samples=samples,
    )


def _results(samples: list[Any]) -> Any:
    """The verifier's success rate over the runs, and per condition (``success_CONDITION``)."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore
    from inspect_ai.scorer import CORRECT

    scored = [s for s in samples if s.scores]
    by_condition: dict[str, list[bool]] = {}
    for s in scored:
        passed = s.scores["verifier"].value == CORRECT
        by_condition.setdefault(str(s.metadata.get("condition")), []).append(passed)
    rates = {"accuracy": [p for ps in by_condition.values() for p in ps]}
    rates |= {f"success_{c}": ps for c, ps in by_condition.items()}
    metrics = {
        name: EvalMetric(name=name, value=sum(ps) / len(ps)) for name, ps in rates.items() if ps
    }
    score = EvalScore(
        name="verifier",
        scorer="verifier",
        scored_samples=len(scored),
        unscored_samples=len(samples) - len(scored),
        metrics=metrics,
    )
    return EvalResults(total_samples=len(samples), completed_samples=len(scored), scores=[score])


def _summed(usages: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for usage in usages:
        for name, used in usage.items():
            out[name] = out[name] + used if name in out else used
    return out


def _packages() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("controlscope")
    except PackageNotFoundError:  # a source tree not installed
        ours = "unknown"
    return {"controlscope": ours, "inspect_ai": version("inspect_ai")}


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(tz=UTC).isoformat()
