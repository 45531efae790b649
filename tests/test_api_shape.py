"""The package's shape on the real tree: function length, layering, the CLI's size, the public API.

The measurements are those of ``benchmarks/api_shape.py`` (loaded from there, so the benchmark
and these checks cannot drift apart); each check is first shown to fail on a small tree that
breaks it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

import controlscope

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _load_shape() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_shape", ROOT / "benchmarks" / "api_shape.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


shape = _load_shape()


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


# --- function length ----------------------------------------------------------------------------


def test_no_function_in_src_is_over_80_lines() -> None:
    spans = shape.function_spans(SRC)
    assert len(spans) > 100  # the walk sees the package (methods and nested functions too)
    too_long = [f"{s.where} {s.qualname}: {s.lines}" for s in spans if s.lines > 80]
    assert not too_long, "\n".join(too_long)


def test_function_spans_count_methods_and_nested_functions(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    src = write_tree(
        tmp_path,
        {
            "pkg/m.py": (
                "class C:\n"
                "    @staticmethod\n"
                "    def method() -> None:\n"
                "        async def inner() -> None:\n"
                "            pass\n\n"
                f"def long() -> None:\n{body}\n"
            )
        },
    )
    spans = {s.qualname: s for s in shape.function_spans(src)}
    assert {name: s.lines for name, s in spans.items()} == {
        "C.method": 3,
        "C.method.inner": 2,
        "long": 86,
    }
    assert spans["C.method"].where.endswith("m.py:3")  # the def line, not the decorator


# --- the import graph ----------------------------------------------------------------------------


def test_package_import_graph_is_acyclic() -> None:
    graph = shape.import_graph(SRC)
    adjacency = shape.edges(graph)
    assert "controlscope.core" in adjacency["controlscope.run"]  # the graph is the real one
    cycles = [
        " -> ".join([*c, c[0]])
        + ": "
        + "; ".join(s.where for a, b in zip(c, [*c[1:], c[0]], strict=True) for s in graph[a][b])
        for c in shape.simple_cycles(adjacency)
    ]
    assert not cycles, "\n".join(cycles)


def test_the_bottom_layer_imports_nothing_above_it() -> None:
    """``controlscope.core`` holds the records every layer shares; it depends on no other part."""
    graph = shape.import_graph(SRC)
    assert graph.get("controlscope.core", {}) == {}


def test_cycles_through_deferred_and_relative_imports_are_found(tmp_path: Path) -> None:
    src = write_tree(
        tmp_path,
        {
            "controlscope/__init__.py": "",
            "controlscope/a/__init__.py": "def f():\n    from controlscope.b import g\n",
            "controlscope/a/_x.py": "from ..c import h\n",
            "controlscope/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from controlscope.a import f\n"
            ),
            "controlscope/c.py": "import controlscope.a._x\nfrom controlscope import b\n",
        },
    )
    graph = shape.import_graph(src)
    assert shape.edges(graph) == {
        "controlscope.a": {"controlscope.b", "controlscope.c"},
        "controlscope.b": {"controlscope.a"},
        "controlscope.c": {"controlscope.a", "controlscope.b"},
    }
    assert shape.simple_cycles(shape.edges(graph)) == [
        ("controlscope.a", "controlscope.b"),
        ("controlscope.a", "controlscope.c"),
        ("controlscope.a", "controlscope.c", "controlscope.b"),
    ]
    [site] = graph["controlscope.b"]["controlscope.a"]
    assert site.deferred and site.where.endswith("b.py:3")
    # at import time only a -> c and c -> a, c -> b remain
    assert shape.simple_cycles(shape.edges(graph, include_deferred=False)) == [
        ("controlscope.a", "controlscope.c")
    ]


# --- the CLI -------------------------------------------------------------------------------------


def test_the_run_command_module_is_under_150_lines() -> None:
    lines = (SRC / "controlscope" / "cli" / "_run.py").read_text().splitlines()
    assert 0 < len(lines) < 150


# --- the public API ------------------------------------------------------------------------------


def test_every_public_name_is_importable() -> None:
    names = controlscope.__all__
    assert len(names) == len(set(names)) and len(names) > 20
    code = "from controlscope import *; import controlscope; print(len(controlscope.__all__))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(names))


def test_every_public_name_is_documented() -> None:
    problems = shape.documentation_problems("controlscope")
    assert set(problems) == set(controlscope.__all__)
    gaps = [p for plist in problems.values() for p in plist]
    assert not gaps, "\n".join(gaps)


def test_docstring_sections_name_their_entries() -> None:
    doc = """Summary.

    Args:
        path: where.
        *names (str): which ones,
            continued: not an entry.
        **options: more.

    Returns:
        The value.

    Free text: not an entry.
    """
    assert shape.docstring_sections(doc) == {
        "Args": ["path", "names", "options"],
        "Returns": [],
    }


UNDOCUMENTED = '''
    """A package whose public names break every part of the rule."""
    from typing import Annotated, Literal, Protocol
    import enum
    from pydantic import BaseModel, Field

    __all__ = ["Alias", "Color", "Good", "Model", "Plug", "VERSION", "fine", "half", "no_doc"]

    VERSION = "1"

    class Color(enum.Enum):
        """Colours.

        Attributes:
            RED: red.
        """
        RED = 1
        BLUE = 2

    class Model(BaseModel):
        """A record without an Attributes section."""
        kind: Literal["m"] = "m"
        size: int

    class Good(BaseModel):
        """A record.

        Attributes:
            size: how big.
        """
        kind: Literal["g"] = "g"
        size: int

    Alias = Annotated[Model | Good, Field(discriminator="kind")]
    """A documented alias of an undocumented and a documented class."""

    class Plug(Protocol):
        """An extension point."""
        def act(self, x: int) -> str:
            """Act."""
            ...

    def fine(a: int, *rest: str) -> int:
        """Sum.

        Args:
            a: first.
            *rest: the others.

        Returns:
            The sum.
        """
        return a

    def half(a: int) -> None:
        """Args are missing."""

    def no_doc() -> int:
        return 1
'''


def test_the_documentation_rule_finds_each_kind_of_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shapedemo.py").write_text(textwrap.dedent(UNDOCUMENTED))
    monkeypatch.syspath_prepend(str(tmp_path))
    problems = {
        name: [p.split(": ", 1)[1] for p in plist]
        for name, plist in shape.documentation_problems("shapedemo").items()
    }
    assert problems == {
        "Alias": ["no Attributes section"],
        "Color": ["Attributes does not name BLUE"],
        "Good": [],
        "Model": ["no Attributes section"],
        "Plug": ["Args does not name x", "no Returns section"],
        "VERSION": ["no attribute docstring"],
        "fine": [],
        "half": ["Args does not name a"],
        "no_doc": ["no docstring"],
    }
