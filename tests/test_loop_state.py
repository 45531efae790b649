"""The run loop's state has one owner per part: the controller writes its own state (the
boundary handler's: the running reply, the decisions, the condition, schedule and reviewer it
reviews with), the planner loop owns the planner's (history, turns, blocks), and anything that
steers a trajectory from outside changes its condition, schedule or reviewer through
``steer``. No module but ``run/_controller.py`` assigns an attribute of a controller."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
OWNER = Path("controlscope/run/_controller.py")

CONTROL_TYPES = ("Controller", "TrajectoryControl")
"""Annotations that name a controller (the class, or the protocol a hook sees it through)."""

CONTROL_NAMES = frozenset({"controller", "control"})
"""Names that hold a controller wherever they appear (a parameter, a variable, an attribute)."""


def _controls(scope: ast.AST) -> set[str]:
    """The names in ``scope`` (a function or a module) that hold a controller: parameters
    annotated with one, variables assigned from ``Controller(...)``, and the usual names."""
    found = set(CONTROL_NAMES)
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        args = [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]
        for arg in args:
            if arg.annotation is not None and any(
                t in ast.unparse(arg.annotation) for t in CONTROL_TYPES
            ):
                found.add(arg.arg)
    for node in ast.walk(scope):
        value = getattr(node, "value", None)
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "Controller"
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
    return found


def _reaches_control(target: ast.expr, names: set[str]) -> bool:
    """Whether the assigned ``target`` is an attribute (or item) of something a controller
    holds: ``controller.turn``, ``c.reply.turn``, ``self.controller.history[0]``."""
    if not isinstance(target, ast.Attribute | ast.Subscript):
        return False
    node: ast.expr = target.value
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr in CONTROL_NAMES:
                return True
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return isinstance(node, ast.Name) and node.id in names


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        out: list[ast.expr] = []
        for t in node.targets:
            out += t.elts if isinstance(t, ast.Tuple | ast.List) else [t]
        return out
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def controller_writes(src: Path) -> list[str]:
    """``file:line`` of every assignment to a controller's attribute outside its own module
    (``setattr`` on one included)."""
    found: list[str] = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if rel == OWNER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]
        for scope in scopes:
            names = _controls(scope)
            for node in ast.walk(scope):
                writes = [t for t in _targets(node) if _reaches_control(t, names)]
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "setattr"
                    and node.args
                    and _reaches_control(ast.Attribute(value=node.args[0], attr="x"), names)
                ):
                    writes.append(node.args[0])
                found += [f"{rel}:{w.lineno}" for w in writes]
    return sorted(set(found))


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_no_module_but_the_controllers_own_assigns_a_controller_attribute() -> None:
    assert controller_writes(SRC) == []


def test_writes_to_a_controller_are_found_however_it_is_reached(tmp_path: Path) -> None:
    src = write_tree(
        tmp_path,
        {
            "controlscope/run/_controller.py": (
                "class Controller:\n    def __init__(self):\n        self.turn = 0\n"
            ),
            "controlscope/run/_loop.py": (
                "from controlscope.run._controller import Controller\n"
                "def run_loop(c: Controller, state):\n"
                "    state.turn += 1\n"  # the loop's own state: fine
                "    c.turn += 1\n"
                "    c.reply.blocks = ()\n"
                "def other(controller):\n"
                "    controller.history[0] = 1\n"
                "    turn = controller.turn\n"  # a read: fine
                "class Recovery:\n"
                "    def after(self):\n"
                "        self.plans = 1\n"  # its own: fine
                "        self.controller.plan_error = None\n"
            ),
            "controlscope/replay/_hook.py": (
                "def attach(hook, control: 'TrajectoryControl'):\n"
                "    control.steer(condition=None)\n"  # the one way: fine
                "    hook.schedule, control.schedule = 1, 2\n"
                "    setattr(control, 'reviewer', None)\n"
                "def made():\n"
                "    made = Controller()\n"
                "    made.condition = None\n"
            ),
        },
    )
    assert controller_writes(src) == [
        "controlscope/replay/_hook.py:3",
        "controlscope/replay/_hook.py:4",
        "controlscope/replay/_hook.py:7",
        "controlscope/run/_loop.py:12",
        "controlscope/run/_loop.py:4",
        "controlscope/run/_loop.py:5",
        "controlscope/run/_loop.py:7",
    ]
