"""The paper's experiments, each one file and one command (paper sections 4-6, Tables 1-7,
Figures 2-3).

An experiment is a TOML file (the packaged ones are in :data:`EXPERIMENTS_DIR`, linked from
the repository's ``examples/``) naming panels, frozen replays of recorded operations, and
tables in the paper's shape whose cells are metrics of those panels, each next to the paper's
reported value where the paper reports one. It is a thin layer: the panels run through
:func:`controlscope.panel.run_panel`, the replays through
:func:`controlscope.replay.replay_operation`, every number comes from
:func:`controlscope.analysis.report` and the analysis' own statistics.

- :func:`list_experiments` and :func:`load_experiment` (:class:`ExperimentError`, one line);
- :func:`resolve`: the panels' configurations at a size (``quick`` or ``paper``) with the
  roles' models and their provider options;
- :func:`run_experiment`: run (or resume) every panel and replay into ``OUT/`` and write its
  tables, figures, ``paper-vs-ours.md`` and ``report.md`` (:func:`write_results`).
"""

from controlscope.experiments._config import (
    EXPERIMENTS_DIR,
    METRICS,
    SIZES,
    Cell,
    Experiment,
    ExperimentError,
    ExperimentInfo,
    FigureEntry,
    Header,
    PanelEntry,
    ReplayEntry,
    Row,
    Size,
    Table,
    known_names,
    list_experiments,
    load_experiment,
)
from controlscope.experiments._metrics import CellValue, cell_value
from controlscope.experiments._replays import ROW_COLUMNS, read_replays, run_replays
from controlscope.experiments._resolve import (
    DEFAULT_MODEL,
    deep_merge,
    resolve,
    role_models,
    role_options,
    unserved,
)
from controlscope.experiments._runner import (
    EXPERIMENT_FILE,
    ExperimentObserver,
    ExperimentResult,
    run_experiment,
    write_results,
)

__all__ = [
    "DEFAULT_MODEL",
    "EXPERIMENTS_DIR",
    "EXPERIMENT_FILE",
    "METRICS",
    "ROW_COLUMNS",
    "SIZES",
    "Cell",
    "CellValue",
    "Experiment",
    "ExperimentError",
    "ExperimentInfo",
    "ExperimentObserver",
    "ExperimentResult",
    "FigureEntry",
    "Header",
    "PanelEntry",
    "ReplayEntry",
    "Row",
    "Size",
    "Table",
    "cell_value",
    "deep_merge",
    "known_names",
    "list_experiments",
    "load_experiment",
    "read_replays",
    "resolve",
    "role_models",
    "role_options",
    "run_experiment",
    "run_replays",
    "unserved",
    "write_results",
]
