"""The package's measured shape: function length, import cycles, documented API, repeated knowledge.

Prints the offenders (``file:line``) of each check, then, as its LAST line, one JSON object:

- ``longest_function_lines``: the longest function or method in ``src/``, as ``ast`` counts it
  (``end_lineno - lineno + 1`` of every ``def`` and ``async def``, nested ones included; the
  ``def`` line is the first, decorators are not counted); target at most 80;
- ``functions_over_80_lines``: how many exceed 80 lines;
- ``package_import_cycles``: the number of elementary cycles in the import graph between the
  packages and top-level modules of ``controlscope`` (``controlscope.core``, ``controlscope.run``,
  ``controlscope.scope``, ...; the package's own ``__init__`` is the node ``controlscope``). Every
  ``import`` statement counts: at module level, inside functions and under ``TYPE_CHECKING``,
  because each is a dependency of one layer on another even where it does not run at import time;
  target 0;
- ``package_import_cycles_at_import_time``: the same counting only the imports that run when the
  module is imported (module level, not under ``TYPE_CHECKING``);
- ``public_names_documented_ratio``: the share of the names in ``controlscope.__all__`` that are
  documented by the rule of :func:`documentation_problems` (target 1.0);
- ``public_names``: how many names ``controlscope.__all__`` lists;
- ``files_naming_each_operation``: for each operation kind but ``keep`` (whose word is also the
  Keep scope's), the files under ``src/controlscope`` that name one of its identifiers (its kind
  string, its model class, its ``RunSummary`` counter) outside the operation registry, in code
  (by ``ast``: docstrings do not count) and in templates and static files; the largest count,
  target at most 6 (:func:`operation_files`);
- ``settings_declarations``: for each run setting whose name no record reuses, the class fields
  with a default named after it (or after its panel key) and the ``--flag`` literals naming it;
  the largest count, target 1 (:func:`setting_declarations`);
- ``private_cross_imports``: the (importing module, imported module) pairs where a module
  imports another package's private module (``run._models`` -> ``models._factory``); target 0
  (:func:`private_imports`);
- ``import_cycles_including_type_only``: the elementary cycles of the import graph between
  modules (not packages), every import statement counted, ``TYPE_CHECKING`` ones included;
  target 0 (:func:`module_cycles`).

Usage: ``python benchmarks/api_shape.py`` (with ``controlscope`` importable). The functions
here are also the checks of ``tests/test_api_shape.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import importlib.util
import inspect
import itertools
import json
import re
import types
import typing
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "controlscope"
SRC = ROOT / "src"
MAX_FUNCTION_LINES = 80


# --- function length ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FunctionSpan:
    """One ``def`` in the source tree.

    Attributes:
        where: ``path:line`` of its ``def`` line, the path relative to the repository.
        qualname: the dotted name inside its module (``Class.method``, ``outer.inner``).
        lines: ``end_lineno - lineno + 1``.
    """

    where: str
    qualname: str
    lines: int


def _python_files(src: Path) -> list[Path]:
    return sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts)


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def function_spans(src: Path = SRC) -> list[FunctionSpan]:
    """Return every function and method under ``src``, longest first.

    Args:
        src: the directory holding the package sources.

    Returns:
        One span per ``def``/``async def`` (nested ones included), longest first.
    """
    spans: list[FunctionSpan] = []

    def visit(node: ast.AST, prefix: str, path: Path) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                end = child.end_lineno if child.end_lineno is not None else child.lineno
                where = f"{_relative(path)}:{child.lineno}"
                spans.append(FunctionSpan(where, name, end - child.lineno + 1))
                visit(child, f"{name}.", path)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", path)
            else:
                visit(child, prefix, path)

    for path in _python_files(src):
        visit(ast.parse(path.read_text(), str(path)), "", path)
    return sorted(spans, key=lambda s: (-s.lines, s.where))


# --- the import graph between packages -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ImportSite:
    """One import statement that makes one package depend on another.

    Attributes:
        where: ``path:line`` of the statement.
        deferred: True when it does not run at import time (inside a function, or under
            ``if TYPE_CHECKING:``).
    """

    where: str
    deferred: bool


ImportGraph = dict[str, dict[str, list[ImportSite]]]
"""``graph[a][b]``: the import statements by which node ``a`` depends on node ``b``."""


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def node_of(module: str) -> str | None:
    """Return the graph node of a dotted module name, or None outside the package.

    Args:
        module: a dotted module name (``controlscope.run._spec``).

    Returns:
        ``controlscope.<first component>`` (``controlscope.run``), ``controlscope`` for the
        package itself, None for any other module.
    """
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    return ".".join(parts[:2])


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of ``tree`` with whether it is deferred."""

    def walk(node: ast.AST, deferred: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, deferred
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, True)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), deferred)
            else:
                yield from walk(child, deferred)

    yield from walk(tree, False)


def _targets(stmt: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted modules (or ``module.name`` candidates) one import statement reaches."""
    if isinstance(stmt, ast.Import):
        return [alias.name for alias in stmt.names]
    base = stmt.module or ""
    if stmt.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - (stmt.level - 1)]
        base = ".".join([*here, base] if base else here)
    return [f"{base}.{alias.name}" for alias in stmt.names]


def _import_sites(src: Path) -> Iterator[tuple[str, str, ImportSite]]:
    """Every import of the package's modules: ``(importing module, imported module, site)``.

    ``from a import b`` imports the module ``a.b`` when it exists, else the module ``a`` (for
    a package, its ``__init__``); every statement counts (see :func:`_imports`).
    """
    modules = {_module_name(p, src): p for p in _python_files(src)}
    for module, path in modules.items():
        if node_of(module) is None:
            continue
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for stmt, deferred in _imports(tree):
            for target in _targets(stmt, module, is_package):
                name = target if target in modules else target.rpartition(".")[0]
                if isinstance(stmt, ast.Import):
                    name = target
                yield module, name, ImportSite(f"{_relative(path)}:{stmt.lineno}", deferred)


def import_graph(src: Path = SRC) -> ImportGraph:
    """Build the import graph between the package's nodes (see :func:`node_of`) from ``ast``.

    ``from controlscope import X`` depends on the node ``controlscope.X`` when ``X`` is a
    subpackage or module, else on ``controlscope`` itself (a name its ``__init__`` exports).
    Imports inside one node are not edges.

    Args:
        src: the directory holding the package sources.

    Returns:
        ``graph[a][b]``: the statements by which ``a`` imports from ``b``.
    """
    graph: ImportGraph = defaultdict(lambda: defaultdict(list))
    for module, name, site in _import_sites(src):
        here, there = node_of(module), node_of(name)
        if here is not None and there is not None and there != here:
            graph[here][there].append(site)
    return {a: dict(b) for a, b in graph.items()}


def edges(graph: ImportGraph, *, include_deferred: bool = True) -> dict[str, set[str]]:
    """Return the adjacency of ``graph``, optionally without the deferred imports.

    Args:
        graph: an import graph from :func:`import_graph`.
        include_deferred: count imports inside functions and under ``TYPE_CHECKING`` too.

    Returns:
        For each node, the nodes it depends on.
    """
    return {
        a: {
            b
            for b, sites in targets.items()
            if include_deferred or any(not s.deferred for s in sites)
        }
        for a, targets in graph.items()
    }


def simple_cycles(adjacency: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Return every elementary cycle of a small directed graph, each once.

    A cycle is listed from its least node (so ``a -> b -> a`` and ``b -> a -> b`` are one).

    Args:
        adjacency: for each node, its successors.

    Returns:
        The cycles, each as the tuple of its nodes in order, sorted.
    """
    cycles: list[tuple[str, ...]] = []
    nodes = sorted(set(adjacency) | {b for bs in adjacency.values() for b in bs})
    for start in nodes:
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(adjacency.get(node, ())):
                if nxt == start:
                    cycles.append(tuple(path))
                elif nxt > start and nxt not in path:
                    stack.append((nxt, [*path, nxt]))
    return sorted(cycles)


# --- imports between modules: private modules of other packages, cycles --------------------------


def module_graph(src: Path = SRC) -> ImportGraph:
    """Build the import graph between the package's modules (not its packages) from ``ast``.

    A package is the module of its ``__init__``; ``from a import b`` imports the module
    ``a.b`` when it exists, else ``a``. Every import statement counts: at module level, inside
    functions and under ``TYPE_CHECKING`` (a type-only import is a dependency too).

    Args:
        src: the directory holding the package sources.

    Returns:
        ``graph[a][b]``: the statements by which module ``a`` imports module ``b``.
    """
    modules = {_module_name(p, src) for p in _python_files(src)}
    graph: ImportGraph = defaultdict(lambda: defaultdict(list))
    for module, name, site in _import_sites(src):
        if name not in modules or name == module or node_of(name) is None:
            continue
        if site not in graph[module][name]:  # one statement importing several names: one site
            graph[module][name].append(site)
    return {a: dict(b) for a, b in graph.items()}


def _is_private_module(module: str) -> bool:
    """A module below its node whose dotted path has a private part (``run._fork``); a node's
    own private top-level module (``controlscope._tree``) is not."""
    node = node_of(module)
    if node is None:
        return False
    below = module.split(".")[len(node.split(".")) :]
    return any(p.startswith("_") and not p.startswith("__") for p in below)


def private_imports(src: Path = SRC) -> dict[str, list[ImportSite]]:
    """The imports of another node's private module (see :func:`node_of`).

    Every import statement counts (deferred and ``TYPE_CHECKING`` ones too); a node's own
    private modules are its business.

    Args:
        src: the directory holding the package sources.

    Returns:
        ``"importer -> imported"`` (dotted module names) to the statements, one key per
        distinct pair, sorted.
    """
    found: dict[str, list[ImportSite]] = defaultdict(list)
    for module, name, site in _import_sites(src):
        there = node_of(name)
        if there is not None and there != node_of(module) and _is_private_module(name):
            sites = found[f"{module} -> {name}"]
            if site not in sites:  # one statement importing several names is one site
                sites.append(site)
    return dict(sorted(found.items()))


def private_cross_imports(src: Path = SRC) -> int:
    """How many distinct (importing module, imported module) pairs :func:`private_imports`
    finds; target 0.

    Args:
        src: the directory holding the package sources.

    Returns:
        The number of pairs.
    """
    return len(private_imports(src))


def _cyclic_part(adjacency: dict[str, set[str]]) -> dict[str, set[str]]:
    """The edges that lie on a cycle (``a -> b`` where ``b`` reaches ``a``), so that
    :func:`simple_cycles` explores only the strongly connected parts of a large graph."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in adjacency.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reach = {node: reachable(node) for node in adjacency}
    return {a: {b for b in bs if a in reach.get(b, set())} for a, bs in adjacency.items()}


def module_cycles(src: Path = SRC) -> list[tuple[str, ...]]:
    """The elementary cycles of :func:`module_graph` (type-only imports included).

    Args:
        src: the directory holding the package sources.

    Returns:
        Each cycle as its modules in order, from the least (see :func:`simple_cycles`).
    """
    return simple_cycles(_cyclic_part(edges(module_graph(src))))


def import_cycles_including_type_only(src: Path = SRC) -> int:
    """How many elementary import cycles the package's modules form, counting every import
    statement (inside functions and under ``TYPE_CHECKING`` too); target 0.

    Args:
        src: the directory holding the package sources.

    Returns:
        ``len(module_cycles(src))``.
    """
    return len(module_cycles(src))


# --- how many places know one setting, one operation kind ----------------------------------------

SETTING_PROBES = (
    "view_bounds",
    "app_protocol",
    "reviewer_protocol",
    "planner_format",
    "review_mode",
    "reviewer_tool_choice",
    "planner_temperature",
    "reviewer_max_tokens",
    "planner_options",
    "reviewer_options",
    "max_calls",
    "max_turns",
    "max_seconds",
    "max_repairs",
    "max_wall_seconds",
    "max_blocks",
    "max_block_requests",
    "request_timeout_s",
    "worker_memory_mb",
    "reviewer_model",
    "base_url",
    "review_timeout_s",
)
"""The run settings :func:`settings_declarations` counts: those whose names no record reuses."""

SHARED_SETTING_NAMES = (
    "scope",
    "lattice",
    "schedule",
    "view",
    "replace_boundary",
    "temperature",
    "max_tokens",
    "draw",
    "source_program",
    "source",
    "block_exec_s",
    "isolation",
    "model",
    "cache",
    "reviewer",
)
"""The run settings left out of the count: records (events, requests, summaries) or other
options use the same names, so a field so named is not necessarily a declaration."""

PANEL_KEYS = {
    "planner": {
        "format": "planner_format",
        "temperature": "planner_temperature",
        "options": "planner_options",
    },
    "reviewer": {
        "model": "reviewer_model",
        "mode": "review_mode",
        "tool_choice": "reviewer_tool_choice",
        "protocol": "reviewer_protocol",
        "temperature": "temperature",
        "max_tokens": "reviewer_max_tokens",
        "options": "reviewer_options",
    },
}
"""A panel file's keys that are not the setting's name, by section: ``[planner] format`` is
``planner_format``."""

_FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def _docstring_nodes(tree: ast.Module) -> set[int]:
    """The ``id`` of every string statement of ``tree`` (docstrings, attribute docstrings)."""
    bodies = (getattr(node, "body", None) for node in ast.walk(tree))
    return {
        id(stmt.value)
        for body in bodies
        if isinstance(body, list)
        for stmt in body
        if isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    }


def _setting_of(class_name: str, field: str) -> str:
    """The setting a class field declares: its panel key's setting in a ``Planner*Settings`` or
    ``Reviewer*Settings`` class, else its name."""
    if class_name.endswith("Settings"):
        for section, keys in PANEL_KEYS.items():
            if class_name.lower().startswith(section) and field in keys:
                return keys[field]
    return field


def setting_declarations(src: Path = SRC) -> dict[str, list[str]]:
    """Where each probe setting (:data:`SETTING_PROBES`) is declared.

    A declaration is a class field with a default named after the setting (or after its panel
    key, :func:`_setting_of`), ``ClassVar`` s left out, or a string literal that is exactly the
    setting's option (``"--base-url"``).

    Args:
        src: the directory holding the package sources.

    Returns:
        Each probe setting to its declarations (``path:line (Class)`` or ``path:line (--flag)``).
    """
    found: dict[str, list[str]] = {name: [] for name in SETTING_PROBES}
    for path in _python_files(src):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.AnnAssign)
                        and isinstance(stmt.target, ast.Name)
                        and stmt.value is not None
                        and "ClassVar" not in ast.unparse(stmt.annotation)
                    ):
                        name = _setting_of(node.name, stmt.target.id)
                        if name in found:
                            found[name].append(f"{_relative(path)}:{stmt.lineno} ({node.name})")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and _FLAG.fullmatch(node.value)
            ):
                name = node.value[2:].replace("-", "_")
                if name in found:
                    found[name].append(f"{_relative(path)}:{node.lineno} ({node.value})")
    return found


def settings_declarations(src: Path = SRC) -> int:
    """The most declarations one probe setting has (:func:`setting_declarations`); target 1.

    Args:
        src: the directory holding the package sources.

    Returns:
        The largest count.
    """
    return max((len(v) for v in setting_declarations(src).values()), default=0)


OPERATION_IDENTIFIERS = {
    "patch_arguments": ("patch_arguments", "PatchArguments", "argument_patches"),
    "patch_block_data": ("patch_block_data", "PatchBlockData", "block_data_patches"),
    "replace_workflow": ("replace_workflow", "ReplaceWorkflow", "replacements"),
}
"""Each operation kind's identifiers: its kind string, its model class and its ``RunSummary``
counter. ``keep`` is left out: its word is also the Keep scope's and the review fallback's."""

OPERATION_REGISTRY = ("core/_operations.py", "core/_op_registry.py")
"""The registry's files (paths below the package), left out of the count with each kind's own
``core/_op_<kind>.py``."""

TEXT_SUFFIXES = (".html", ".js", ".css")
"""The package's templates and static files, read as text."""


def _word(identifiers: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(i) for i in identifiers)
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])")


def _names_of(node: ast.AST) -> tuple[str | None, ...]:
    """The identifiers a node reads or binds: a name, an attribute, an import or its alias, a
    def/class/argument/keyword name."""
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        return (node.attr,)
    if isinstance(node, ast.alias):
        return (node.name.rpartition(".")[2], node.asname)
    if isinstance(node, ast.arg | ast.keyword):
        return (node.arg,)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return (node.name,)
    return ()


_KIND_OF = {ident: kind for kind, idents in OPERATION_IDENTIFIERS.items() for ident in idents}
_KIND_WORDS = {kind: _word(idents) for kind, idents in OPERATION_IDENTIFIERS.items()}


def _mentions(path: Path) -> dict[str, list[int]]:
    """The lines where a file names each operation kind: in Python, an identifier
    (:func:`_names_of`) or a whole word of a string that is not a docstring; in a template or
    static file, a whole word."""
    text = path.read_text()
    lines: dict[str, list[int]] = defaultdict(list)
    if path.suffix != ".py":
        for kind, word in _KIND_WORDS.items():
            lines[kind] = [text.count("\n", 0, m.start()) + 1 for m in word.finditer(text)]
        return lines
    tree = ast.parse(text, str(path))
    docstrings = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                for kind, word in _KIND_WORDS.items():
                    if word.search(node.value):
                        lines[kind].append(node.lineno)
            continue
        for name in _names_of(node):
            if name in _KIND_OF:
                lines[_KIND_OF[name]].append(getattr(node, "lineno", 0))
    return lines


def operation_files(src: Path = SRC) -> dict[str, list[str]]:
    """The files that name each operation kind (:data:`OPERATION_IDENTIFIERS`) outside the
    registry (:data:`OPERATION_REGISTRY` and the kind's ``core/_op_<kind>.py``).

    Python files are read by ``ast`` (docstrings do not count); templates and static files
    (:data:`TEXT_SUFFIXES`) as text, whole words.

    Args:
        src: the directory holding the package sources.

    Returns:
        Each kind to its files, as ``path:line`` of the first mention, sorted.
    """
    package = src / PACKAGE
    files = sorted(
        p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", *TEXT_SUFFIXES)
    )
    found: dict[str, list[str]] = {kind: [] for kind in OPERATION_IDENTIFIERS}
    for path in files:
        inside = path.relative_to(package).as_posix()
        for kind, lines in _mentions(path).items():
            if lines and inside not in {*OPERATION_REGISTRY, f"core/_op_{kind}.py"}:
                found[kind].append(f"{_relative(path)}:{min(lines)}")
    return found


def files_naming_each_operation(src: Path = SRC) -> int:
    """The most files that name one operation kind outside its registry entry
    (:func:`operation_files`); target at most 6.

    Args:
        src: the directory holding the package sources.

    Returns:
        The largest count.
    """
    return max((len(v) for v in operation_files(src).values()), default=0)


# --- documented public names ---------------------------------------------------------------------

_SECTION = re.compile(r"^(Args|Arguments|Attributes|Returns|Yields|Raises):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:")


def docstring_sections(doc: str | None) -> dict[str, list[str]]:
    """Split a Google-style docstring into its sections and the names each one documents.

    Args:
        doc: the docstring (None when there is none).

    Returns:
        Section title (``Args``, ``Returns``...) to the entry names found directly under it
        (``name: text`` or ``name (type): text`` one indentation level in; ``Arguments`` is
        filed under ``Args``). Returns and Yields map to their entries, often none.
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    indent: int | None = None
    for line in inspect.cleandoc(doc or "").splitlines():
        stripped = line.strip()
        match = _SECTION.match(line)
        if match:
            title = "Args" if match.group(1) == "Arguments" else match.group(1)
            current = sections.setdefault(title, [])
            indent = None
            continue
        if current is None or not stripped:
            continue
        width = len(line) - len(line.lstrip())
        if width == 0:
            current = None
            continue
        if indent is None:
            indent = width
        entry = _ENTRY.match(stripped)
        if width == indent and entry:
            current.append(entry.group(1).lstrip("*"))
    return sections


def _returns_nothing(annotation: object) -> bool:
    return annotation in (None, type(None), "None", "NoReturn", "Never", typing.NoReturn)


def _function_problems(func: Callable[..., object], doc: str | None, label: str) -> list[str]:
    """The function rule: an ``Args:`` section naming every parameter (when it has any) and a
    ``Returns:``/``Yields:`` section unless it returns None."""
    if not doc:
        return [f"{label}: no docstring"]
    sections = docstring_sections(doc)
    problems = []
    params = [
        name
        for name, p in inspect.signature(func).parameters.items()
        if name not in ("self", "cls") and p.kind is not p.POSITIONAL_ONLY
    ]
    missing = [p for p in params if p not in sections.get("Args", [])]
    if missing:
        problems.append(f"{label}: Args does not name {', '.join(missing)}")
    returns = inspect.signature(func).return_annotation
    if not _returns_nothing(returns) and "Returns" not in sections and "Yields" not in sections:
        problems.append(f"{label}: no Returns section")
    return problems


def _class_node(cls: type) -> tuple[ast.ClassDef, str] | None:
    """The ``ClassDef`` of ``cls`` in its source file, and ``path:line``."""
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:
        return None
    if path is None:
        return None
    body: list[ast.stmt] = ast.parse(Path(path).read_text()).body
    found: ast.ClassDef | None = None
    for part in cls.__qualname__.split("."):
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        body = found.body
    assert found is not None
    return found, f"{_relative(Path(path))}:{found.lineno}"


def _is_tag(stmt: ast.AnnAssign) -> bool:
    """A discriminator tag: ``kind: Literal["x"] = "x"`` (it says only which class this is)."""
    annotation, value = stmt.annotation, stmt.value
    return (
        isinstance(annotation, ast.Subscript)
        and ast.unparse(annotation.value) in ("Literal", "typing.Literal")
        and isinstance(annotation.slice, ast.Constant)
        and isinstance(value, ast.Constant)
        and annotation.slice.value == value.value
    )


def _declared_attributes(cls: type, node: ast.ClassDef) -> list[str]:
    """Public data attributes the class body declares: annotated names (fields) that are neither
    ``ClassVar`` nor discriminator tags, properties, and enum members."""
    if issubclass(cls, enum.Enum):
        return [m.name for m in cls if m.name in cls.__dict__]
    names = []
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" not in ast.unparse(stmt.annotation) and not _is_tag(stmt):
                names.append(stmt.target.id)
        elif isinstance(stmt, ast.FunctionDef) and any(
            ast.unparse(d) in ("property", "functools.cached_property", "cached_property")
            for d in stmt.decorator_list
        ):
            names.append(stmt.name)
    return [n for n in names if not n.startswith("_") and n != "model_config"]


def _is_private_base(base: type, cls: type) -> bool:
    """A base class of ``cls`` from the same package whose name is private (``_Event``)."""
    same_package = base.__module__.split(".")[0] == cls.__module__.split(".")[0]
    return same_package and base.__name__.startswith("_")


def _class_problems(cls: type, label: str) -> list[str]:
    """The class rule (see :func:`documentation_problems`)."""
    located = _class_node(cls)
    if located is None:
        return [f"{label}: source not found"]
    node, where = located
    label = f"{label} ({where})"
    doc = ast.get_docstring(node)
    if not doc:
        return [f"{label}: no docstring"]
    sections = docstring_sections(doc)
    problems = []
    attributes = _declared_attributes(cls, node)
    documented = set(sections.get("Attributes", []))
    for base in cls.__mro__[1:]:  # a private base's fields are documented in it or here
        located_base = _class_node(base) if _is_private_base(base, cls) else None
        if located_base is not None:
            base_node = located_base[0]
            attributes += _declared_attributes(base, base_node)
            base_sections = docstring_sections(ast.get_docstring(base_node))
            documented.update(base_sections.get("Attributes", []))
    if attributes:
        missing = [a for a in dict.fromkeys(attributes) if a not in documented]
        if not documented:
            problems.append(f"{label}: no Attributes section")
        elif missing:
            problems.append(f"{label}: Attributes does not name {', '.join(missing)}")
    own = {s.name: s for s in node.body if isinstance(s, ast.FunctionDef)}
    if "__init__" in own:  # a hand-written constructor: its parameters are documented
        init = cls.__dict__["__init__"]
        init_doc = ast.get_docstring(own["__init__"])
        merged = "\n".join(d for d in (doc, init_doc) if d)
        problems += [
            p
            for p in _function_problems(init, merged, f"{label} constructor")
            if "Returns" not in p
        ]
    if getattr(cls, "_is_protocol", False):  # an extension point: its methods are the contract
        for name, stmt in own.items():
            if name.startswith("_") or name in attributes:
                continue
            problems += _function_problems(
                cls.__dict__[name], ast.get_docstring(stmt), f"{label} method {name}"
            )
    return problems


def _with_type_checking(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` with the statements of its ``if TYPE_CHECKING:`` blocks in their place (the
    re-exports a package imports lazily)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if (
            isinstance(stmt, ast.If)
            and isinstance(stmt.test, ast.Name)
            and stmt.test.id == "TYPE_CHECKING"
        ):
            out += stmt.body
        else:
            out.append(stmt)
    return out


def _assignment_docstring(module: str, name: str) -> tuple[bool, str] | None:
    """Whether the module-level assignment of ``name`` that ``module`` exports (following
    ``from ... import`` re-exports) has an attribute docstring, as Sphinx reads them: a string
    literal right after it, or a ``#:`` comment right before it; None when no assignment is
    found."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin)
    text = path.read_text()
    lines = text.splitlines()
    body = _with_type_checking(ast.parse(text).body)
    is_package = path.name == "__init__.py"
    for i, stmt in enumerate(body):
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        elif type(stmt).__name__ == "TypeAlias":  # ``type X = ...`` (Python 3.12+)
            targets = [getattr(stmt, "name")]  # noqa: B009
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            nxt = body[i + 1] if i + 1 < len(body) else None
            after = (
                isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            )
            before = lines[stmt.lineno - 2].lstrip().startswith("#:") if stmt.lineno > 1 else False
            return after or before, f"{_relative(path)}:{stmt.lineno}"
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    one = ast.ImportFrom(module=stmt.module, names=[alias], level=stmt.level)
                    [source] = _targets(one, module, is_package)
                    return _assignment_docstring(source.rpartition(".")[0], alias.name)
    return None


_TYPE_ALIAS_TYPE: type | None = getattr(typing, "TypeAliasType", None)  # Python 3.12+


def _is_type_alias(obj: object) -> bool:
    if _TYPE_ALIAS_TYPE is not None and isinstance(obj, _TYPE_ALIAS_TYPE):
        return True
    return typing.get_origin(obj) is not None or isinstance(obj, types.UnionType)


def _alias_classes(obj: object) -> Iterator[type]:
    """The classes a type alias is made of (through ``Annotated``, unions, generics)."""
    if isinstance(obj, type) and typing.get_origin(obj) is None:
        yield obj
        return
    if _TYPE_ALIAS_TYPE is not None and isinstance(obj, _TYPE_ALIAS_TYPE):
        obj = getattr(obj, "__value__", obj)
    for arg in typing.get_args(obj):
        yield from _alias_classes(arg)


def documentation_problems(package: str = PACKAGE) -> dict[str, list[str]]:
    """Check every name of ``package.__all__`` against the documentation rule.

    The rule, by what the name is bound to:

    - a function: a docstring with an ``Args:`` section naming every parameter (when it takes
      any) and a ``Returns:`` (or ``Yields:``) section unless it returns None;
    - a class: a docstring of its own; an ``Attributes:`` section naming every public data
      attribute its body, or the body of a private base class of the same package, declares
      (fields, properties, enum members; a discriminator tag such as
      ``kind: Literal["keep"] = "keep"`` says only which class it is and is exempt; the
      private base's own ``Attributes:`` section counts too); a
      hand-written ``__init__`` has its parameters named under ``Args:`` (in the class's or the
      constructor's docstring); a ``Protocol`` has each public method it declares documented by
      the function rule, since those methods are what an implementation must provide;
    - a type alias (``Annotated``/union/``Literal`` forms): an attribute docstring (a string
      literal right after its assignment or a ``#:`` comment right before it, as Sphinx reads
      them), and every controlscope class it is made of documented by the class rule;
    - any other object (a constant such as ``__version__``): an attribute docstring.

    Args:
        package: the package whose ``__all__`` is checked.

    Returns:
        For each name of ``__all__``, its problems (an empty list when it is documented). A
        name that cannot be imported has the problem ``not importable``.
    """
    mod = importlib.import_module(package)
    result: dict[str, list[str]] = {}
    for name in mod.__all__:
        if not hasattr(mod, name):
            result[name] = [f"{name}: not importable from {package}"]
            continue
        obj = getattr(mod, name)
        if inspect.isclass(obj) and not _is_type_alias(obj):
            result[name] = _class_problems(obj, name)
        elif inspect.isroutine(obj):
            func = inspect.unwrap(obj)
            label = f"{name} ({_relative(Path(inspect.getsourcefile(func) or '?'))}:"
            label += f"{inspect.getsourcelines(func)[1]})"
            result[name] = _function_problems(func, func.__doc__, label)
        else:
            result[name] = _constant_problems(package, name, obj)
    return result


def _constant_problems(package: str, name: str, obj: object) -> list[str]:
    found = _assignment_docstring(package, name)
    if found is None:
        return [f"{name}: no module-level assignment found"]
    documented, where = found
    problems = [] if documented else [f"{name} ({where}): no attribute docstring"]
    if _is_type_alias(obj):
        for cls in dict.fromkeys(_alias_classes(obj)):
            if cls.__module__.split(".")[0] == package.split(".")[0]:
                problems += _class_problems(cls, f"{name} member {cls.__name__}")
    return problems


def main() -> None:
    spans = function_spans()
    long_ones = [s for s in spans if s.lines > MAX_FUNCTION_LINES]
    print(f"functions: {len(spans)}; over {MAX_FUNCTION_LINES} lines: {len(long_ones)}")
    for s in long_ones:
        print(f"  {s.lines:4d}  {s.where}  {s.qualname}")
    graph = import_graph()
    all_cycles = simple_cycles(edges(graph))
    eager_cycles = simple_cycles(edges(graph, include_deferred=False))
    print(f"import cycles between packages: {len(all_cycles)} ({len(eager_cycles)} at import time)")
    _print_cycles(graph, all_cycles)
    problems = documentation_problems()
    documented = [n for n, p in problems.items() if not p]
    print(f"public names documented: {len(documented)} of {len(problems)}")
    for plist in problems.values():
        for p in plist:
            print(f"  {p}")
    summary = {
        "longest_function_lines": spans[0].lines if spans else 0,
        "functions_over_80_lines": len(long_ones),
        "package_import_cycles": len(all_cycles),
        "package_import_cycles_at_import_time": len(eager_cycles),
        "public_names_documented_ratio": round(len(documented) / len(problems), 4),
        "public_names": len(problems),
        **_print_knowledge(),
    }
    print(json.dumps(summary))


def _print_cycles(graph: ImportGraph, cycles: list[tuple[str, ...]]) -> None:
    """Print each cycle and the import statements of each of its edges."""
    for cycle in cycles:
        ring = [*cycle, cycle[0]]
        print("  " + " -> ".join(ring))
        for a, b in itertools.pairwise(ring):
            sites = ", ".join(
                f"{s.where}{' (deferred)' if s.deferred else ''}" for s in graph[a][b]
            )
            print(f"      {a} -> {b}: {sites}")


def _print_knowledge() -> dict[str, int]:
    """Print the offenders of the four measures of repeated knowledge and shared imports;
    return their keys of the JSON line."""
    operations = operation_files()
    counts = ", ".join(f"{kind} {len(files)}" for kind, files in operations.items())
    print(f"files naming an operation kind outside the registry: {counts}")
    for kind, files in operations.items():
        print(f"  {kind}: {', '.join(files)}")
    settings = setting_declarations()
    repeated = {name: where for name, where in settings.items() if len(where) > 1}
    print(f"settings declared more than once: {len(repeated)} of {len(SETTING_PROBES)} probes")
    for name, where in repeated.items():
        print(f"  {name} ({len(where)}): {', '.join(where)}")
    private = private_imports()
    print(f"imports of another package's private module: {len(private)}")
    for pair, sites in private.items():
        print(f"  {pair}: {', '.join(s.where for s in sites)}")
    cycles = module_cycles()
    print(f"import cycles between modules, type-only imports included: {len(cycles)}")
    _print_cycles(module_graph(), cycles)
    return {
        "files_naming_each_operation": max(map(len, operations.values()), default=0),
        "settings_declarations": max(map(len, settings.values()), default=0),
        "private_cross_imports": len(private),
        "import_cycles_including_type_only": len(cycles),
    }


if __name__ == "__main__":
    main()
