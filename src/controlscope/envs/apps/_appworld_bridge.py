"""The bridge to the real AppWorld: a small program run with AppWorld's own interpreter.

``appworld`` pins pydantic 1, which breaks the ``mcp`` SDK and our own models, so it lives in a
virtual environment of its own (``APPWORLD_PYTHON``). This file is the only code that touches
it: it imports nothing of controlscope (only the standard library and ``appworld``) and is run
as ``APPWORLD_PYTHON _appworld_bridge.py`` with ``APPWORLD_ROOT`` set. It reads one JSON request
per line on stdin and answers one JSON line on stdout:

- ``{"op": "tasks", "splits": [...]}``: ``{"tasks": [{"id", "split", "instruction"}...]}``
  (``appworld.load_task_ids`` and ``appworld.task.Task.load``);
- ``{"op": "open", "task_id", "experiment"}``: opens ``appworld.AppWorld`` for the task (its
  own database state, outputs under the experiment) and answers its instruction;
- ``{"op": "docs"}``: the documentation of every API the task may use (AppWorld's
  ``api_docs`` app, run through ``AppWorld.execute``);
- ``{"op": "call", "app", "api", "arguments"}``: one API call through ``AppWorld.execute``,
  answered ``{"ok", "text"}`` (an AppWorld error is ``ok: false`` with its message); the state
  is saved after every call (``AppWorld.save``), so the evaluator can read it later;
- ``{"op": "evaluate", "task_id", "experiment"}``: AppWorld's own evaluator on the saved state
  (``appworld.evaluator.evaluate_task``), ``{"success", "passes", "failures", "report"}``.

An error is answered ``{"error": "..."}``. Written against appworld 0.1.3; what could not be
tested here (no task data offline) is listed in the README.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on the path; its modules must not shadow
# AppWorld's (controlscope has an ``appworld_env`` module, others may come).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != _HERE]

_WORLD: Any = None


def _execute(code: str) -> tuple[bool, str]:
    output = _WORLD.execute(code)
    text = str(output)
    return not text.lstrip().startswith("Execution failed"), text


def _tasks(request: dict[str, Any]) -> dict[str, Any]:
    from appworld import load_task_ids  # type: ignore[import-not-found]
    from appworld.task import Task  # type: ignore[import-not-found]

    found = []
    for split in request["splits"]:
        for task_id in load_task_ids(split):
            task = Task.load(task_id=task_id, load_ground_truth=False)
            found.append({"id": task_id, "split": split, "instruction": task.instruction})
    return {"tasks": found}


def _open(request: dict[str, Any]) -> dict[str, Any]:
    global _WORLD
    from appworld import AppWorld

    _WORLD = AppWorld(task_id=request["task_id"], experiment_name=request["experiment"])
    return {"instruction": _WORLD.task.instruction}


DOCS = """import json as _json
_docs = []
for _app in apis.api_docs.show_app_descriptions():
    _name = _app["name"] if isinstance(_app, dict) else _app
    for _api in apis.api_docs.show_api_descriptions(app_name=_name):
        _docs.append(apis.api_docs.show_api_doc(app_name=_name, api_name=_api["name"]))
print(_json.dumps(_docs))
"""


def _docs(request: dict[str, Any]) -> dict[str, Any]:
    ok, output = _execute(DOCS)
    if not ok:
        return {"error": output}
    return {"docs": json.loads(output.strip().splitlines()[-1])}


def _call(request: dict[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(request["arguments"])
    code = (
        "import json as _json\n"
        f"print(_json.dumps(apis.{request['app']}.{request['api']}(**_json.loads({arguments!r}))))"
    )
    ok, output = _execute(code)
    _WORLD.save()
    return {"ok": ok, "text": output.strip()}


def _evaluate(request: dict[str, Any]) -> dict[str, Any]:
    from appworld.evaluator import evaluate_task  # type: ignore[import-not-found]

    tracker = evaluate_task(request["task_id"], request["experiment"])
    report = tracker.to_dict() if hasattr(tracker, "to_dict") else {"report": str(tracker)}
    return {
        "success": bool(tracker.success),
        "passes": int(getattr(tracker, "pass_count", 0)),
        "failures": int(getattr(tracker, "fail_count", 0)),
        "report": json.loads(json.dumps(report, default=str)),
    }


OPS = {"tasks": _tasks, "open": _open, "docs": _docs, "call": _call, "evaluate": _evaluate}


def main() -> None:
    """Answer requests until stdin closes."""
    for line in sys.stdin:
        try:
            request = json.loads(line)
            answer = OPS[request["op"]](request)
        except Exception as error:  # every failure is an answer; the caller decides
            answer = {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(answer, default=str) + "\n")
        sys.stdout.flush()
    if _WORLD is not None:
        _WORLD.close()


if __name__ == "__main__":
    main()
