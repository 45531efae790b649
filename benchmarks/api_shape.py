"""The package's measured shape: function length, import cycles between packages, documented API.

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
- ``public_names``: how many names ``controlscope.__all__`` lists.

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
    modules = {_module_name(p, src): p for p in _python_files(src)}
    graph: ImportGraph = defaultdict(lambda: defaultdict(list))
    for module, path in modules.items():
        here = node_of(module)
        if here is None:
            continue
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for stmt, deferred in _imports(tree):
            for target in _targets(stmt, module, is_package):
                # ``from a import b``: the module a.b when it exists, else the module a
                name = target if target in modules else target.rpartition(".")[0]
                if isinstance(stmt, ast.Import):
                    name = target
                there = node_of(name)
                if there is not None and there != here:
                    site = ImportSite(f"{_relative(path)}:{stmt.lineno}", deferred)
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
    for cycle in all_cycles:
        ring = [*cycle, cycle[0]]
        print("  " + " -> ".join(ring))
        for a, b in itertools.pairwise(ring):
            sites = ", ".join(
                f"{s.where}{' (deferred)' if s.deferred else ''}" for s in graph[a][b]
            )
            print(f"      {a} -> {b}: {sites}")
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
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
