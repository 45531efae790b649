"""An experiment's file: its header, sizes, panels, replays, tables and figures, checked when
it is loaded (pydantic); see ``docs/architecture.md`` ("The flow of an experiment").

An experiment is one TOML file named after what it reproduces (``table1_sustained.toml``).
It names panels (each a panel file's keys: ``base``, deep-merged with a size and the panel's
``set``), optional frozen replays of recorded operations, and tables in the paper's shape whose
cells are metrics of those panels, each optionally carrying the paper's reported value.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from controlscope.core import MAX_CALLS, MAX_SECONDS, DrawIndex, Flag, SourceIndex, read_toml
from controlscope.panel import config_problem
from controlscope.replay import Endpoint

Size = Literal["quick", "paper"]
"""An experiment's size: ``quick`` (the embedded model on 2 cores in at most 30 minutes,
every table cell kept) or ``paper`` (the paper's)."""

SIZES: tuple[Size, ...] = ("quick", "paper")
"""Every size."""

Metric = Literal[
    "successes",
    "rate",
    "difference",
    "wins_losses",
    "sum",
    "within",
    "tgc",
    "sgc",
    "replays",
    "text",
    "wins_losses_ties",
    "activations",
    "first_requests",
    "ratio",
    "change",
    "gap_share",
    "units_more",
]
"""What a table cell shows (``controlscope.experiments._metrics``; the derived cost cells
``ratio``, ``change``, ``gap_share`` and ``units_more``: ``controlscope.experiments._derived``)."""

METRICS: tuple[str, ...] = Metric.__args__  # type: ignore[attr-defined]
"""Every metric."""

Operations = Literal["replacements", "first_replacement", "patches"]
"""Which recorded operations of a run a replay replays."""

FigureKind = Literal["effort_tokens", "candidates"]
"""A figure: a panel's effort and token figures (Figure 2), or a replay's candidates (Figure 3)."""

ReplayField = Literal["goal_reached", "block_finished", "success", "matched"]
"""What a ``replays`` cell counts among a replay's rows."""

EXPERIMENTS_DIR = Path(str(resources.files("controlscope.experiments") / "configs"))
"""Where the packaged experiments are (the repository's ``examples/`` links here)."""

_NAME = re.compile(r"^[a-z0-9_]+$")
_PLANNER = "planner"


class ExperimentError(ValueError):
    """An experiment that cannot be loaded, resolved or run: an unknown name (the known ones
    listed), a file that is not TOML, an unknown key, metric, panel or replay, a panel that
    does not check. The message is one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _named(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{value!r} must be lowercase letters, digits and _")
    return value


class Header(_Strict):
    """The ``[experiment]`` table.

    Attributes:
        title: a one-line title.
        reproduces: the paper's section, table or figure.
        needs: the environment and models it needs.
        quick_minutes: measured minutes at quick size on the embedded model; None: not
            measured.
        roles: the model roles it uses (``planner`` plans every panel).
    """

    title: str
    reproduces: str
    needs: str
    quick_minutes: Annotated[float, Field(strict=True, gt=0.0, le=MAX_SECONDS / 60)] | None = None
    roles: list[str] = Field(default_factory=lambda: [_PLANNER, "fast", "reasoning"])

    @model_validator(mode="after")
    def _planner_role(self) -> Header:
        for role in self.roles:
            _named(role)
        if _PLANNER not in self.roles:
            raise ValueError("roles: the planner role is every panel's planner; name it")
        return self


class PanelEntry(_Strict):
    """One ``[[panels]]`` entry: a panel of the experiment.

    Attributes:
        name: its folder under ``OUT/panels/``.
        reviewer: the role whose model reviews.
        sources: which source-program indices it runs (P1 = 0); None: all.
        set: panel keys deep-merged onto base and size for this panel.
        sizes: panel keys per size for this panel, deep-merged after ``set`` (a panel's
            quick tasks where ``set`` picks its own, as ALFWorld's cohorts do).
    """

    name: str
    reviewer: str
    sources: list[SourceIndex] | None = None
    set: dict[str, Any] = Field(default_factory=dict)
    sizes: dict[Size, dict[str, Any]] = Field(default_factory=dict)

    _check_name = field_validator("name")(_named)


class ReplayEntry(_Strict):
    """One ``[[replays]]`` entry: frozen replays of a panel's recorded operations.

    Attributes:
        name: its folder under ``OUT/replays/``.
        panel: whose runs' operations are replayed.
        scope: which runs (every draw of this scope).
        operations: which recorded operations of each run.
        endpoint: ``candidate``, ``retained`` or ``shared_patch``.
        failing_only: only runs whose verdict failed (Figure 3: failing runs).
    """

    name: str
    panel: str
    scope: str = "full"
    operations: Operations = "replacements"
    endpoint: Endpoint = "candidate"
    failing_only: Flag = False

    _check_name = field_validator("name")(_named)


class Cell(_Strict):
    """A table cell: a metric of a panel (or a replay, or a literal text).

    Attributes:
        metric: what it shows (:data:`Metric`; ``text`` when only ``text`` is given).
        text: the literal text of a ``text`` cell.
        panel: the panel it reads.
        scope: the condition's scope.
        draw: the reviewer draw (Keep: 0); ``"all"``: every draw of the reviewing scope pooled
            (Table 6: "each row contains 108 draws"); a pooled ``wins_losses`` sums each
            draw's paired wins and losses, a pooled ``difference``, ``tgc`` or ``sgc`` is
            ``n/a``.
        source: the source-program index; None: every source.
        split: the task's split: its environment's ``split`` metadata (the apps, AppWorld),
            else the first part of its id (ALFWorld's cohort); None: every task.
        tasks: task ids or categories; None: every task.
        versus: the baseline scope (``difference``, ``wins_losses``, ``wins_losses_ties``,
            and the derived ``ratio``, ``change``, ``gap_share``, ``units_more``); with
            ``versus_panel``, None: the cell's own scope.
        versus_panel: the panel the baseline runs in, when it is not ``panel``: units are
            paired across the two panels of the experiment (the same task, seed and source
            program, and the same Keep run: its terminal state hash is compared), paper B.1,
            B.2, A.3, A.4.
        column: the run column(s) summed (``sum`` and the derived metrics); a list sums
            several.
        k: calls or actions (``within``); the number of units (``gap_share``).
        replay: the replay it reads (``replays``).
        field: what a ``replays`` cell counts.
        program: a ``replays`` cell's source-program index; None: every program.
        paper: the paper's reported value, as the paper prints it.
        paper_n: what the paper's value counts over (units, draws, replays), when its text
            does not say it (a ``k/n`` of ``successes``, ``first_requests`` or ``replays``
            does); ``paper-vs-ours.md`` prints it beside ours.
    """

    metric: Metric = "text"
    text: str | None = None
    panel: str | None = None
    scope: str = "full"
    draw: DrawIndex | Literal["all"] = 0
    source: SourceIndex | None = None
    split: str | None = None
    tasks: list[str] | None = None
    versus: str | None = None
    versus_panel: str | None = None
    column: str | list[str] | None = None
    k: Annotated[int, Field(strict=True, ge=0, le=MAX_CALLS)] | None = None
    replay: str | None = None
    field: ReplayField = "goal_reached"
    program: SourceIndex | None = None
    paper: str | None = None
    paper_n: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _needs(self) -> Cell:
        baseline = "versus_panel" if self.versus_panel is not None else "versus"
        needs = {
            "text": ("text",),
            "difference": ("panel", baseline),
            "wins_losses": ("panel", baseline),
            "wins_losses_ties": ("panel", baseline),
            "first_requests": ("panel", "versus_panel"),
            "sum": ("panel", "column"),
            "within": ("panel", "k"),
            "ratio": ("panel", "column", baseline),
            "change": ("panel", "column", baseline),
            "gap_share": ("panel", "column", "versus", "k"),
            "units_more": ("panel", "column", "versus"),
            "replays": ("replay",),
        }.get(self.metric, ("panel",))
        missing = [key for key in needs if getattr(self, key) is None]
        if missing:
            raise ValueError(f"metric {self.metric} needs {', '.join(missing)}")
        return self


class Row(_Strict):
    """A table row: its label and one cell per column."""

    label: str
    cells: list[Cell]


class Table(_Strict):
    """One ``[[tables]]`` entry: a table in the paper's shape.

    Attributes:
        name: its file names (``tables/NAME.md``, ``.csv``).
        title: its title.
        columns: the column headers after the row label.
        rows: its rows.
        notes: text printed under it.
    """

    name: str
    title: str
    columns: list[str]
    rows: list[Row]
    notes: str = ""

    _check_name = field_validator("name")(_named)

    @model_validator(mode="after")
    def _shape(self) -> Table:
        for row in self.rows:
            if len(row.cells) != len(self.columns):
                raise ValueError(
                    f"row {row.label!r} has {len(row.cells)} cells for {len(self.columns)} columns"
                )
        return self


class FigureEntry(_Strict):
    """One ``[[figures]]`` entry.

    Attributes:
        name: its file names' stem (``figures/NAME_effort.png`` ...).
        kind: ``effort_tokens`` (a panel's Figure 2 pair) or ``candidates`` (Figure 3, a
            replay's candidates).
        panel: the panel (``effort_tokens``).
        replay: the replay (``candidates``).
    """

    name: str
    kind: FigureKind
    panel: str | None = None
    replay: str | None = None

    _check_name = field_validator("name")(_named)

    @model_validator(mode="after")
    def _source(self) -> FigureEntry:
        wanted = "panel" if self.kind == "effort_tokens" else "replay"
        if getattr(self, wanted) is None:
            raise ValueError(f"a {self.kind} figure needs {wanted}")
        return self


LINKED_KEYS = ("keep_from", "diverge_from")
"""A panel's ``[execution]`` keys that name another panel's folder (``../NAME``)."""


def _linked_earlier(entry: PanelEntry, earlier: list[str]) -> None:
    """A panel that takes runs from another (``keep_from``, ``diverge_from``) names an earlier
    panel of the experiment as ``../NAME``: panels run in order, so its runs exist by then.

    Raises:
        ValueError: another folder, or a panel that is not earlier.
    """
    execution = entry.set.get("execution")
    if not isinstance(execution, dict):
        return
    for key in LINKED_KEYS:
        value = execution.get(key)
        if value is None:
            continue
        name = value[3:] if isinstance(value, str) and value.startswith("../") else None
        if name not in earlier:
            shown = ", ".join(f"../{n}" for n in earlier) or "none: it is the first panel"
            raise ValueError(
                f"panel {entry.name}: execution.{key} names an earlier panel of the experiment "
                f"(../NAME), not {value!r}; earlier panels: {shown}"
            )


class Experiment(_Strict):
    """An experiment's file, checked.

    Attributes:
        name: its name (the file's stem).
        path: its file.
        experiment: the header.
        base: panel keys every panel shares.
        sizes: panel keys per size, deep-merged onto ``base``.
        panels: its panels.
        replays: its replays.
        tables: its tables.
        figures: its figures.
    """

    name: str
    path: Path
    experiment: Header
    base: dict[str, Any] = Field(default_factory=dict)
    sizes: dict[Size, dict[str, Any]] = Field(default_factory=dict)
    panels: list[PanelEntry]
    replays: list[ReplayEntry] = Field(default_factory=list)
    tables: list[Table] = Field(default_factory=list)
    figures: list[FigureEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> Experiment:
        panels = _unique("panels", [p.name for p in self.panels])
        replays = _unique("replays", [r.name for r in self.replays])
        _unique("tables", [t.name for t in self.tables])
        _unique("figures", [f.name for f in self.figures])
        for entry in self.panels:
            if entry.reviewer not in self.experiment.roles:
                raise ValueError(
                    f"panel {entry.name}: reviewer role {entry.reviewer!r} is not among "
                    f"experiment.roles ({', '.join(self.experiment.roles)})"
                )
        for index, entry in enumerate(self.panels):
            _linked_earlier(entry, [p.name for p in self.panels[:index]])
        for replay in self.replays:
            _known(f"replay {replay.name}: panel", replay.panel, panels)
        for table in self.tables:
            for row in table.rows:
                for cell in row.cells:
                    where = f"table {table.name}, row {row.label!r}"
                    if cell.panel is not None:
                        _known(f"{where}: panel", cell.panel, panels)
                    if cell.versus_panel is not None:
                        _known(f"{where}: versus_panel", cell.versus_panel, panels)
                    if cell.replay is not None:
                        _known(f"{where}: replay", cell.replay, replays)
        for figure in self.figures:
            if figure.panel is not None:
                _known(f"figure {figure.name}: panel", figure.panel, panels)
            if figure.replay is not None:
                _known(f"figure {figure.name}: replay", figure.replay, replays)
        return self

    def paper_cells(self) -> int:
        """How many cells carry the paper's value."""
        return sum(c.paper is not None for t in self.tables for r in t.rows for c in r.cells)


def _unique(what: str, names: list[str]) -> list[str]:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{what}: {repeated[0]!r} is named twice")
    return names


def _known(where: str, name: str, known: list[str]) -> None:
    if name not in known:
        raise ValueError(f"{where} {name!r} is not defined; defined: {', '.join(known) or 'none'}")


class ExperimentInfo(BaseModel):
    """A packaged experiment as ``controlscope experiment list`` shows it.

    Attributes:
        name: its name.
        title: its title.
        reproduces: what of the paper it reproduces.
        needs: what it needs.
        quick_minutes: measured minutes at quick size on the embedded model; None: not yet.
        problem: why it does not load (None when it does).
    """

    name: str
    title: str = ""
    reproduces: str = ""
    needs: str = ""
    quick_minutes: float | None = None
    problem: str | None = None


def list_experiments() -> list[ExperimentInfo]:
    """Every packaged experiment (what ``controlscope experiment list`` prints).

    Returns:
        One entry per packaged experiment, by name; one that does not load is listed with its
        problem.
    """
    found = []
    for name in known_names():
        try:
            header = load_experiment(name).experiment
        except ExperimentError as err:
            found.append(ExperimentInfo(name=name, problem=str(err)))
            continue
        found.append(
            ExperimentInfo(
                name=name,
                title=header.title,
                reproduces=header.reproduces,
                needs=header.needs,
                quick_minutes=header.quick_minutes,
            )
        )
    return found


def known_names() -> list[str]:
    """The packaged experiments' names, sorted."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.toml"))


def load_experiment(name_or_path: str | Path) -> Experiment:
    """Load and check an experiment: a packaged one by name (``table1_sustained``), or a file.

    Args:
        name_or_path: a packaged experiment's name, or a TOML file's path.

    Returns:
        The checked experiment (its panels are checked by :func:`resolve`).

    Raises:
        ExperimentError: an unknown name (the known ones listed), an unreadable or non-TOML
            file, a panel file given as an experiment, or a problem (one line, the key named).
    """
    given = str(name_or_path)
    path = Path(given)
    if not given.endswith(".toml") and "/" not in given:
        path = EXPERIMENTS_DIR / f"{given}.toml"
        if not path.is_file():
            raise ExperimentError(
                f"no experiment named {given!r}; known: {', '.join(known_names())}"
            )
    try:
        data = read_toml(path)
    except ValueError as err:
        raise ExperimentError(str(err)) from None
    if "experiment" not in data and ("tasks" in data or "env" in data):
        raise ExperimentError(
            f"{path} is a panel file, not an experiment (no [experiment] table): "
            f"run it with controlscope panel {path} --out DIR"
        )
    try:
        return Experiment.model_validate({**data, "name": path.stem, "path": path.resolve()})
    except ValidationError as err:
        raise ExperimentError(f"{path}: {_problem(err)}") from None


def _problem(err: ValidationError) -> str:
    """A validation error as one line: the panel layer's form, without echoing whole tables
    (a check of a whole table names its own problem)."""
    first = err.errors()[0]
    if isinstance(first.get("input"), dict | list) or first["type"] == "value_error":
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return config_problem(err)
