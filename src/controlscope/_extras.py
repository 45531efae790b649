"""Optional extras (``local``, ``ray``, ``alfworld``): the one-line error that names the
``pip install`` to run when the package behind one is missing."""

from __future__ import annotations

import importlib.util

__all__ = ["MissingExtra", "require_extra"]


class MissingExtra(ImportError, ValueError):
    """An optional extra that a request needs is not installed. A ``ValueError`` too: what was
    asked for cannot run in this installation, and callers report it as bad input (exit 2,
    one line), before anything runs.

    Args:
        extra: the extra's name (``local``, ``ray``, ``alfworld``).
        what: what needs it, for the message (``the embedded local model``).
        module: the top-level module the extra installs (``llama_cpp``).

    Attributes:
        extra: the extra's name.
    """

    def __init__(self, extra: str, what: str, module: str) -> None:
        super().__init__(
            f"{what} needs the '{extra}' extra ({module} is not installed): "
            f"pip install 'controlscope[{extra}]'",
            name=module,
        )
        self.extra = extra


def require_extra(extra: str, module: str, what: str) -> None:
    """Check that the package behind an optional extra can be imported.

    Args:
        extra: the extra's name, as in ``pip install 'controlscope[EXTRA]'``.
        module: the top-level module the extra installs (``llama_cpp``, ``ray``,
            ``alfworld``).
        what: what needs it, for the message (``the embedded local model``).

    Raises:
        MissingExtra: the module cannot be found; its message is one line naming the
            ``pip install`` to run.
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken half-installed package
        found = False
    if not found:
        raise MissingExtra(extra, what, module)
