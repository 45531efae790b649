"""A branch that replays its prefix, run in a process of its own (paper 3.1: every branch from
the same ``(h, s)``, under the same reviewer).

A branch started by fork goes on in a copy of the trunk's process, so it starts from the
reviewer and the planner as they were at the boundary (a scripted model's next answer, a Python
reviewer's fields), and nothing one branch does to them reaches the next. A branch that
replays its prefix runs the same way: in a process forked from the branching one just before
it starts (the reviewer and planner are not used in the prefix, which the recording answers),
so both mechanisms give every branch the reviewer as it was at the boundary. The child hands
its result back through a temporary file; a child that dies is recorded as far as its log
goes, like a forked branch.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import IO, Any, NoReturn, TypeVar

from controlscope.replay._fork import die_with
from controlscope.run import CHILD_GRACE_S, INTERRUPTS, interruptible_branch, reap

T = TypeVar("T")


def run_apart(run: Callable[[], T], wall_s: float) -> tuple[T | None, str | None]:
    """Call ``run`` in a child process forked from this one, and wait for it.

    Args:
        run: what the child does (one branch, recorded in its run directory); its result is
            pickled back.
        wall_s: the branch's wall-clock budget: the child is killed after it plus
            :data:`~controlscope.run.CHILD_GRACE_S`.

    Returns:
        ``run``'s result (None when the child ended without one: it died, or its result could
        not be pickled) and why the child ended abnormally (None when it did not). Where this
        process cannot fork, ``run`` is called here, and the problem says so.

    Raises:
        BaseException: what ``run`` raised in the child (re-raised here when it pickles);
            KeyboardInterrupt when this wait was interrupted (the child has recorded its end
            by then, or been killed).
    """
    with tempfile.TemporaryFile() as box:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # what was printed so far is not printed again by the child
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
        try:
            pid = os.fork()
        except OSError as err:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            return run(), f"no process could be forked for it ({err}); it ran in this one"
        if pid == 0:
            _child(run, box, mask, os.getppid())
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        problem = reap(pid, wall_s + CHILD_GRACE_S)
        box.seek(0)
        try:
            kind, value = pickle.load(box)
        except Exception:  # nothing (it died), or what cannot be read back
            return None, problem or "the branch's process ended without its result"
    if kind == "raised" and isinstance(value, BaseException):
        raise value
    return (value if kind == "result" else None), problem


def _child(
    run: Callable[[], Any], box: IO[bytes], mask: set[int | signal.Signals], parent: int
) -> NoReturn:
    """The child's side: run, put the result (or what was raised) in ``box``, end the process
    without returning to the caller's code (nothing of the parent's exit handlers runs)."""
    code = 1
    outcome: tuple[str, Any] = ("raised", RuntimeError("the branch's process did not run"))
    try:
        interruptible_branch()  # before interrupts are let through
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        die_with(parent)
        outcome = ("result", run())
        code = 0
    except BaseException as err:  # handed to the parent, which raises it
        outcome = ("raised", err)
    finally:
        with contextlib.suppress(BaseException):
            signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)  # nothing stops the exit now
        with contextlib.suppress(BaseException):
            try:
                pickle.dump(outcome, box)
            except Exception:  # an unpicklable result: the parent reads the log
                box.seek(0)
                box.truncate()
                pickle.dump(("unreadable", None), box)
            box.flush()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)
