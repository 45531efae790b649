"""Keep the ``needs_weights`` and ``network`` markers honest.

A test without ``needs_weights`` runs with ``CONTROLSCOPE_HOME`` pointing at an empty directory
(named so that an error quoting it says why), so it cannot find the embedded model's weights;
a test without ``network`` runs with ``PIP_NO_INDEX=1``, so pip cannot reach the package index
and cannot assemble them either. A test that needs either but lacks its marker fails instead of
passing on a machine that happens to have the weights cached. Subprocesses inherit both.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

_NO_WEIGHTS_HOME = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    home = Path(tempfile.mkdtemp(prefix="controlscope-tests-"))
    config.stash[_NO_WEIGHTS_HOME] = home / "home-of-a-test-not-marked-needs_weights"


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_NO_WEIGHTS_HOME, None)
    if home is not None:
        shutil.rmtree(home.parent, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Run each test (its fixtures' setup and teardown included) under its markers' access."""
    with pytest.MonkeyPatch.context() as mp:
        if item.get_closest_marker("needs_weights") is None:
            mp.setenv("CONTROLSCOPE_HOME", str(item.config.stash[_NO_WEIGHTS_HOME]))
        if item.get_closest_marker("network") is None:
            mp.setenv("PIP_NO_INDEX", "1")
        return (yield)
