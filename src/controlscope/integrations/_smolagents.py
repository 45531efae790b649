"""smolagents: a ``CodeAgent`` whose code actions run in a reviewed
:class:`~controlscope.Executor`, through smolagents' own executor interface (``PythonExecutor``,
the shape of its remote executors); the agent is otherwise unchanged.

What smolagents calls a code action is a block here; its ``python_interpreter`` step is one
:meth:`~controlscope.Executor.execute`; its tools are the executor's (MCP servers, Python
callables), shown to the model as smolagents tools whose calls run in the worker, each one a
boundary. The step's observation is :func:`~controlscope.integrations.execution_text`: a patched
call shows the arguments it ran with in place of those the code asked for.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from typing import Any

from controlscope._extras import require_extra

require_extra("smolagents", "smolagents", "the smolagents adapter")

from smolagents import CodeAgent, Model  # noqa: E402
from smolagents.local_python_executor import CodeOutput, PythonExecutor  # noqa: E402
from smolagents.tools import AUTHORIZED_TYPES, Tool  # noqa: E402

from controlscope.core import ToolSchema  # noqa: E402
from controlscope.executor import Executor, ExecutorClosed  # noqa: E402
from controlscope.integrations._code_mode import execution_text  # noqa: E402

__all__ = ["ExecutorTool", "ReviewedPythonExecutor", "reviewed_code_agent", "smolagents_tools"]

FINAL_ANSWER = "final_answer"
"""smolagents' tool that ends a run with its argument as the answer."""


class ExecutorTool(Tool):  # type: ignore[misc]  # smolagents ships no type information
    """One of the executor's tools as a smolagents tool: what the agent's prompt shows (name,
    description, inputs from the tool's JSON schema). Its calls run in the executor's worker,
    never through this object.

    Args:
        schema: the tool as the executor lists it.
    """

    skip_forward_signature_validation = True

    def __init__(self, schema: ToolSchema) -> None:
        self.name = schema.name
        self.description = schema.description or schema.name
        self.inputs = _inputs(schema.input_schema)
        self.output_type = "any"
        super().__init__()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Never called: the tool runs in the reviewed executor.

        Raises:
            RuntimeError: always.
        """
        raise RuntimeError(f"{self.name} runs in the reviewed executor, not in this process")


def _inputs(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """smolagents' ``inputs`` for a JSON schema's properties (types it does not know: any)."""
    properties = schema.get("properties")
    required = set(schema.get("required") or ())
    inputs: dict[str, dict[str, Any]] = {}
    for name, spec in (properties if isinstance(properties, dict) else {}).items():
        spec = spec if isinstance(spec, dict) else {}
        given = spec.get("type")
        types = [given] if isinstance(given, str) else given if isinstance(given, list) else []
        known = [t for t in types if t in AUTHORIZED_TYPES]
        entry: dict[str, Any] = {
            "type": known[0] if len(known) == 1 else known or "any",
            "description": str(spec.get("description") or name),
        }
        if name not in required:
            entry["nullable"] = True
        inputs[str(name)] = entry
    return inputs


def smolagents_tools(executor: Executor) -> list[Tool]:
    """The executor's tools as smolagents tools (:class:`ExecutorTool`), for a ``CodeAgent``'s
    ``tools``.

    Raises:
        ExecutorClosed: the executor is closed.
    """
    _check_open(executor)
    return [ExecutorTool(schema) for schema in executor.tools]


class ReviewedPythonExecutor(PythonExecutor):  # type: ignore[misc]  # smolagents is untyped
    """smolagents' executor interface over a reviewed :class:`~controlscope.Executor`: every
    code action is one block, reviewed at every tool call, the namespace kept between actions.

    ``final_answer(x)`` in agent code ends the block and the run with ``x`` (JSON data; any
    other value as its ``repr``). A block that fails (an error, a timeout, a session that ended)
    raises, as smolagents' executors do: the step's error is the block's text. Each block is
    bounded by the executor's limits (``block_exec_s``, the execution budget, the session's
    wall-clock ceiling), which stand for smolagents' own ``timeout_seconds``.

    Args:
        executor: the reviewed executor; it is not closed by :meth:`cleanup` (close it
            yourself).

    Raises:
        ExecutorClosed: the executor is closed.
    """

    def __init__(self, executor: Executor) -> None:
        _check_open(executor)
        self.executor = executor
        self._marker = f"<final_answer {secrets.token_hex(8)}>"
        self._defined = False

    def send_tools(self, tools: dict[str, Tool]) -> None:
        """Check that every tool the agent has runs in the executor, and define
        ``final_answer`` in the worker (once).

        Raises:
            ValueError: a tool (or managed agent) is not one of the executor's.
        """
        names = {schema.name for schema in self.executor.tools}
        strangers = sorted(set(tools) - names - {FINAL_ANSWER})
        if strangers:
            raise ValueError(
                f"the CodeAgent's tool(s) {strangers} are not the executor's "
                f"({sorted(names)}): give them to the Executor (tools=[...] or servers) so "
                "that their calls run under review"
            )
        if FINAL_ANSWER in tools and not self._defined:
            self._run_setup(_final_answer_code(self._marker))
            self._defined = True

    def send_variables(self, variables: dict[str, Any]) -> None:
        """Set the agent's state (its ``additional_args``) in the worker's namespace.

        Raises:
            TypeError: a value is not JSON data, or a name is not an identifier.
        """
        if not variables:
            return
        lines = ["import json as _cs_json"]
        for name, value in variables.items():
            if not (isinstance(name, str) and name.isidentifier()):
                raise TypeError(f"variable name {name!r} is not a Python identifier")
            try:
                text = json.dumps(value)
            except (TypeError, ValueError) as err:
                raise TypeError(f"variable {name!r} is not JSON data: {err}") from None
            lines.append(f"{name} = _cs_json.loads({text!r})")
        lines.append("del _cs_json")
        self._run_setup("\n".join(lines))

    def __call__(self, code_action: str) -> CodeOutput:
        """Run one code action as a block.

        Args:
            code_action: the action's Python source.

        Returns:
            The block's text (:func:`~controlscope.integrations.execution_text`) as its logs,
            and the final answer when the block gave one.

        Raises:
            TypeError: ``code_action`` is not a string.
            ExecutorClosed: the executor is closed or its session ended.
            RuntimeError: the block failed; the message is the block's text.
        """
        run = self.executor.execute(code_action)
        output, answer = _split_answer(run.output, self._marker)
        run = replace(run, output=output)
        if answer is None and not run.ok:
            raise RuntimeError(execution_text(run))
        return CodeOutput(
            output=answer[0] if answer is not None else None,
            logs=execution_text(run),
            is_final_answer=answer is not None,
        )

    def _run_setup(self, code: str) -> None:
        run = self.executor.execute(code)
        if not run.ok:
            raise RuntimeError(f"setting up the reviewed executor failed: {execution_text(run)}")


def _final_answer_code(marker: str) -> str:
    """The worker's ``final_answer``: it prints the answer after ``marker`` and ends the block
    (``SystemExit(0)`` completes a block)."""
    return (
        "def final_answer(answer):\n"
        '    """Ends the task with ``answer`` as its result."""\n'
        "    import json as _cs_json\n"
        f"    print({marker!r} + _cs_json.dumps(answer, default=repr))\n"
        "    raise SystemExit(0)\n"
    )


def _split_answer(output: str, marker: str) -> tuple[str, tuple[Any] | None]:
    """The printed output without the final answer's line, and the answer (in a 1-tuple, so a
    None answer is told apart from none)."""
    kept, answer = [], None
    for line in output.splitlines(keepends=True):
        if line.startswith(marker):
            text = line[len(marker) :]
            try:
                answer = (json.loads(text),)
            except ValueError:  # cut short by the output's bound: the text as it came
                answer = (text.rstrip("\n"),)
        else:
            kept.append(line)
    return "".join(kept), answer


def _check_open(executor: Executor) -> None:
    if not isinstance(executor, Executor):
        raise TypeError(f"executor must be a controlscope.Executor, not {type(executor).__name__}")
    if executor.closed:
        raise ExecutorClosed(f"the executor is closed (its run: {executor.run_dir})")


def reviewed_code_agent(executor: Executor, model: Model, **kwargs: Any) -> CodeAgent:
    """A smolagents ``CodeAgent`` whose code actions run in ``executor``, with the executor's
    tools (:func:`smolagents_tools`).

    Args:
        executor: the reviewed executor.
        model: the agent's smolagents model.
        **kwargs: any other ``CodeAgent`` argument (not ``tools`` or ``executor``).

    Returns:
        The agent.

    Raises:
        ExecutorClosed: the executor is closed.
        TypeError: ``tools`` or ``executor`` was given.
    """
    taken = sorted({"tools", "executor", "executor_type"} & set(kwargs))
    if taken:
        raise TypeError(f"reviewed_code_agent sets {taken} itself")
    python = ReviewedPythonExecutor(executor)
    return CodeAgent(tools=smolagents_tools(executor), model=model, executor=python, **kwargs)
