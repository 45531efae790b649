"""The ALFWorld game files for tests: found, never copied into the repository.

``alfworld_data`` is a session fixture: ``$ALFWORLD_DATA`` when it holds the unpacked cohorts,
else the published tarball (``json_2.1.1_valid.tar.gz``) from ``$ALFWORLD_DATA`` or from the
documented location ``../shared/alfworld/`` beside the repository, unpacked into a temporary
folder once per session. Missing files fail the tests that need them (never a skip).
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from controlscope.envs.alfworld import COHORTS, DATA_ENV

TARBALL = "json_2.1.1_valid.tar.gz"
"""The published evaluation splits (see the shared folder's README)."""

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "alfworld"
"""The documented location of the tarball, beside the repository."""


def _unpacked(folder: Path) -> bool:
    return all((folder / sub).is_dir() for sub in COHORTS.values())


@pytest.fixture(scope="session")
def alfworld_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``json_2.1.1/valid_seen`` and ``json_2.1.1/valid_unseen``."""
    given = os.environ.get(DATA_ENV)
    if given and _unpacked(Path(given)):
        return Path(given)
    candidates = [Path(given) / TARBALL] if given else []
    candidates.append(SHARED / TARBALL)
    tarball = next((c for c in candidates if c.is_file()), None)
    if tarball is None:
        pytest.fail(
            f"the ALFWorld game files are missing: set {DATA_ENV} to a folder holding "
            f"json_2.1.1 (or {TARBALL}), or put {TARBALL} in {SHARED}",
            pytrace=False,
        )
    target = tmp_path_factory.mktemp("alfworld-data")
    with tarfile.open(tarball) as archive:
        archive.extractall(target, filter="data")
    assert _unpacked(target), f"{tarball} does not hold the two cohorts"
    return target


@pytest.fixture
def alfworld_env(alfworld_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ``ALFWORLD_DATA`` at the game files for one test; the data folder."""
    monkeypatch.setenv(DATA_ENV, str(alfworld_data))
    monkeypatch.delenv("CONTROLSCOPE_ALFWORLD_EXCLUDED_SCENES", raising=False)
    return alfworld_data
