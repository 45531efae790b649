"""``controlscope setup`` as a function: what an installation from a package needs before a
filesystem task can run (the pinned MCP filesystem server), and optionally the embedded model's
weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controlscope.envs.filesystem import install_server
from controlscope.models import KNOWN_MODELS, UnknownWeights, ensure_weights, resolve_model_name

__all__ = ["SetupResult", "setup"]


@dataclass(frozen=True)
class SetupResult:
    """What :func:`setup` installed.

    Attributes:
        server: the MCP filesystem server's ``index.js``.
        weights: the embedded model's verified GGUF file, when asked for.
    """

    server: Path
    weights: Path | None = None


def setup(*, weights: str | None = None, progress: bool = False) -> SetupResult:
    """Install the pinned MCP filesystem server into the user's controlscope directory
    (``$CONTROLSCOPE_HOME`` or ``~/.cache/controlscope``) with ``npm ci``, checked against the
    pin's integrity hashes; idempotent. Optionally fetch and verify the embedded model's
    weights (what ``controlscope model pull`` does).

    Args:
        weights: a known embedded model's name (``1.5b``, ``0.5b``) to fetch, or None.
        progress: show the weights' download progress.

    Returns:
        Where the server and the weights are.

    Raises:
        controlscope.SetupError: Node.js or npm is missing or too
            old, or ``npm ci`` failed (one line).
        controlscope.models.WeightsError: the weights could not be fetched or do not match
            their published digest; :class:`~controlscope.models.UnknownWeights` (before
            anything is installed) when ``weights`` names no known model.
    """
    if weights is not None and resolve_model_name(weights) is None:
        known = ", ".join(KNOWN_MODELS)
        raise UnknownWeights(f"{weights!r} names no known embedded model ({known})")
    server = install_server()
    path = ensure_weights(weights, progress=progress) if weights is not None else None
    return SetupResult(server=server, weights=path)
