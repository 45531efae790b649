"""The environment interface shared by the filesystem, ALFWorld and app environments."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from controlscope.core import (
    AnswerKey,
    ClusterBy,
    PlannerFormat,
    Task,
    TaskError,
    ToolSchema,
    ToolServer,
    Verdict,
)


@runtime_checkable
class Environment(Protocol):
    """An environment: tasks, their initial states, a tool server per workspace, verifiers.

    An environment subclasses this class (``class Mine(Environment)``), implements the methods
    without a body here and overrides the capabilities it has; the others keep their defaults.

    Attributes:
        name: the environment's name (``filesystem``...), as ``controlscope run --env`` takes it.
        read_tools: the names of its information-returning tools (a "read block" of the
            paper's local rule, appendix B).
        write_tools: the names of its tools that change the environment's state (a "writer
            block" of the local rule).
        state_in_workspace: the whole state is the workspace directory (the server keeps none
            in memory): a trajectory can then be forked at a boundary, each branch with a copy
            of the workspace and a new server (``controlscope.replay.branch``). Default False:
            branches replay their prefix.
        cluster_by: what a panel's bootstrap resamples when the panel does not say: the task
            category (the filesystem's seven, paper section 4) or the scenario template (the
            apps', paper 5.3 and A.2). Default ``template``.
        problems: one line per thing that looks like a task and cannot be read (``controlscope
            tasks`` prints them). Default none.
    """

    name: str
    read_tools: frozenset[str]
    write_tools: frozenset[str]
    state_in_workspace: bool = False
    cluster_by: ClusterBy = "template"
    problems: Sequence[str] = ()

    def prompt_tools(self, tools: list[ToolSchema]) -> list[ToolSchema]:
        """The tools the planner's system prompt lists (every tool stays callable).

        An environment with more APIs than a prompt can hold lists some and documents the
        rest (the apps: the documentation APIs, paper A.2).

        Args:
            tools: the server's tools.

        Returns:
            Those the prompt lists; by default all of them.
        """
        return tools

    def with_network(self) -> Environment:
        """The same environment with the network granted to its tool server
        (``--allow-network``).

        Returns:
            The environment with the grant.

        Raises:
            TaskError: its server does not ask for the network (the grant would be silently
                meaningless); by default always.
        """
        raise TaskError(
            f"--allow-network grants the network to a task spec's server that asks for it "
            f"(server.network = true); {self.name} has none"
        )

    def tasks(self) -> list[Task]:
        """List the environment's tasks.

        Returns:
            All tasks with default parameters, sorted by id.
        """
        ...

    def task(self, task_id: str, **params: Any) -> Task:
        """One task, with generator parameters (e.g. ``students=75``).

        Args:
            task_id: the task's id (``student_database/english_talent``).
            **params: generator parameters overriding the task's defaults.

        Returns:
            The task with its parameters filled in.

        Raises:
            TaskError: unknown id or bad parameters.
        """
        ...

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Create the task's initial state in ``workspace`` (an existing, empty directory).

        Args:
            task: the task to set up.
            seed: the data seed; the same seed gives the same initial state.
            workspace: the directory to fill.

        Returns:
            What the verifier needs to grade the terminal state (never shown to the agent).

        Raises:
            TaskError: bad seed, or the workspace cannot be written.
        """
        ...

    def start_server(self, workspace: Path) -> ToolServer:
        """Start the environment's tool server confined to ``workspace``.

        Args:
            workspace: the only directory the server may read and write.

        Returns:
            The running server; the caller closes it.
        """
        ...

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """Check the workspace's terminal state; never raises on bad agent output.

        Args:
            task: the task that ran.
            workspace: its workspace in the terminal state.
            answer_key: what :meth:`setup` returned for this workspace.

        Returns:
            The verdict: one check per requirement, success iff all passed.
        """
        ...

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        """``text`` with the parts that differ between two identical runs masked.

        Tool observations can carry readings of the machine's clock (a file's creation or
        access time, the modification time of a file the run wrote) that no seed controls;
        replays compare requests after passing every string through this, so such readings do
        not count as a divergence. Times the task itself set (from its seed) are kept (paper
        A.4).

        Args:
            text: a tool observation or any string built from one.
            since: when the run the text comes from started (seconds since the epoch; None:
                now): readings from about then on are the run's clock.

        Returns:
            ``text`` with those readings masked; ``text`` unchanged when the environment's
            observations are deterministic.
        """
        ...

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        """A hash of the workspace's state, to compare terminal states across branches and
        replays (paper section 3.3 and A.4).

        Args:
            task: the task whose state the workspace holds.
            workspace: the workspace to hash.
            since: when the run whose state it is started (seconds since the epoch; None:
                now), as for :meth:`normalise_observation`: file times from about then on are
                the run's clock, older ones the task's own. A replay passes its recording's
                start, so the same state hashes the same whenever it is replayed.

        Returns:
            A hex digest, equal for equal states.

        Raises:
            TaskError: unknown task or an unreadable workspace.
        """
        ...

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        """Each file of the workspace by relative path, hashed by the rule of
        :meth:`state_hash`: a terminal workspace compared file by file (paper 3.3, A.4).

        Args:
            task: the task whose state the workspace holds.
            workspace: the workspace to hash.
            since: as for :meth:`state_hash`.

        Returns:
            A hash per file (equal for equal files), by relative path.

        Raises:
            TaskError: unknown task or an unreadable workspace.
        """
        ...

    def planner_example(self, fmt: PlannerFormat) -> str:
        """A short worked example for the planner's system prompt.

        Small models need one: without it they tend to redefine the tools.

        Args:
            fmt: the planner's reply format the example is written in.

        Returns:
            The example, or an empty string for none.
        """
        ...

    def planner_note(self) -> str | None:
        """What the planner's system prompt says about how the tools reach the environment.

        Returns:
            The note, for an environment without files (the task message is then the
            instruction alone); None for a filesystem environment (files only through the
            tools, absolute paths in the allowed directory the task message names).
        """
        ...

    def error_hint(self, error: str) -> str | None:
        """A hint for the planner after a block failed, e.g. code that looked for the task's
        files with ``open()``.

        Args:
            error: the failed block's error (its traceback text).

        Returns:
            The hint, or None when the environment has none for this error.
        """
        ...
