"""Model specs: the short strings that name a planner's or a reviewer's model, parsed once.

A spec is what ``--model`` / ``--reviewer-model``, ``RunSpec.model`` and a panel's
``[planner] model`` hold. :meth:`ModelSpec.parse` reads one at the edge; code then asks the
parsed spec what it is (:attr:`ModelSpec.kind`, :attr:`ModelSpec.is_local`, ...) instead of
testing the string's prefix. Building the model it names is the model layer's job
(:func:`controlscope.models.make_model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from controlscope.core._files import absolute_path

ModelKind = Literal["local", "openai", "scripted", "replay"]
"""What a spec names: the embedded model or a GGUF file run here (``local``), a model behind an
OpenAI-compatible endpoint (``openai``), scripted answers (``scripted``) or one role of a
recorded run (``replay``)."""

MODEL_KINDS: tuple[ModelKind, ...] = get_args(ModelKind)
"""Every model kind."""

MODEL_SPEC_FORMS = (
    "local, local:1.5b, local:0.5b, local:PATH.gguf, PATH.gguf, openai, openai:NAME, "
    "scripted:FILE.json, replay:DIR"
)
"""The accepted forms, as help texts and error messages list them."""

_PATH_KINDS: tuple[ModelKind, ...] = ("scripted", "replay")
_BY_NAME: dict[str, ModelKind] = {kind: kind for kind in MODEL_KINDS}


@dataclass(frozen=True)
class ModelSpec:
    """A model spec parsed once: its kind and its argument (a name or a path).

    The forms (:data:`MODEL_SPEC_FORMS`): ``local`` (the embedded 1.5B model), ``local:1.5b``
    and ``local:0.5b`` (an embedded model by name), ``local:PATH.gguf`` and ``PATH.gguf`` (any
    GGUF file), ``openai`` (the model ``CONTROLSCOPE_MODEL`` names) and ``openai:NAME``
    (behind an OpenAI-compatible endpoint), ``scripted:FILE.json`` (scripted answers) and
    ``replay:DIR`` (one role of the run recorded in ``DIR``).

    Attributes:
        kind: what the spec names (:data:`ModelKind`).
        arg: the text after ``kind:`` as written (a model name or a path); ``""`` for a bare
            ``local`` or ``openai``. A bare ``PATH.gguf`` is ``local`` with the path as its
            argument.
        is_local: True for the embedded model or a GGUF file: it runs in this machine's
            processes, on every core, one run at a time.
        names_path: True for ``scripted`` and ``replay``: the argument is a file or directory
            that a configuration file's relative path is read against (:meth:`anchored`).
        path: the file or directory the spec names: a ``scripted`` file, a ``replay``
            directory, or a GGUF file (a ``local`` argument ending in ``.gguf``), as written;
            None otherwise (a bare spec, an embedded model's name, an ``openai`` model).
        takes_provider_options: True for ``openai`` only: provider options (a reasoning mode,
            ``extra_body`` fields) reach a provider; the other kinds have none.

    Raises:
        ValueError: from the constructor, for a kind that is not a :data:`ModelKind` or a
            ``scripted``/``replay`` spec without a path (the words of :meth:`parse`).
    """

    kind: ModelKind
    arg: str = ""

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(
                f"unknown model spec {str(self)!r}; expected one of: {MODEL_SPEC_FORMS}"
            )
        if self.kind in _PATH_KINDS and not self.arg:
            raise ValueError(f"{self.kind} spec needs a path: {self.kind}:PATH")

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """Read a spec string.

        Surrounding whitespace is ignored; the kind is the text before the first ``:`` (a
        text without ``:`` that ends in ``.gguf``, in any case, is a ``local`` GGUF file).

        Args:
            text: e.g. ``"local"``, ``"models/q.gguf"``, ``"openai:gpt-4o"``,
                ``"replay:runs/a"``.

        Returns:
            The parsed spec.

        Raises:
            ValueError: ``unknown model spec '...'; expected one of: ...`` (the forms of
                :data:`MODEL_SPEC_FORMS`), or ``scripted spec needs a path: scripted:PATH``
                (``replay`` alike) when a path-naming spec has none.
        """
        stripped = text.strip()
        kind, sep, rest = stripped.partition(":")
        if not sep and stripped.lower().endswith(".gguf"):
            return cls("local", stripped)
        known = _BY_NAME.get(kind)
        if known is None:
            raise ValueError(f"unknown model spec {text!r}; expected one of: {MODEL_SPEC_FORMS}")
        return cls(known, rest)

    @property
    def is_local(self) -> bool:
        """The embedded model or a GGUF file (see the class's Attributes)."""
        return self.kind == "local"

    @property
    def names_path(self) -> bool:
        """A ``scripted`` file or a ``replay`` directory (see the class's Attributes)."""
        return self.kind in _PATH_KINDS

    @property
    def path(self) -> Path | None:
        """The file or directory the spec names, as written (see the class's Attributes)."""
        if self.names_path or (self.kind == "local" and self.arg.lower().endswith(".gguf")):
            return Path(self.arg)
        return None

    @property
    def takes_provider_options(self) -> bool:
        """An ``openai`` model (see the class's Attributes)."""
        return self.kind == "openai"

    def anchored(self, folder: Path) -> ModelSpec:
        """This spec with a relative ``scripted``/``replay`` path read from ``folder``.

        A configuration file's specs are read from the file's folder, so a panel runs, and
        resumes, from any directory. ``~`` is expanded; an absolute path and every other kind
        of spec are returned unchanged.

        Args:
            folder: the folder of the file that holds the spec.

        Returns:
            The spec with an absolute path, or this spec.
        """
        if not self.names_path or not self.arg.strip():
            return self
        given = Path(self.arg.strip()).expanduser()
        absolute = given if given.is_absolute() else absolute_path(folder / given)
        return ModelSpec(self.kind, str(absolute))

    def __str__(self) -> str:
        """The canonical text: ``kind:arg``, or ``kind`` when the argument is empty;
        ``ModelSpec.parse(str(spec)) == spec``."""
        return f"{self.kind}:{self.arg}" if self.arg else self.kind
