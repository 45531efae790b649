"""One ALFWorld game on its own text engine: load, step, the success signal, the state.

The engine is TextWorld's PDDL environment (``textworld.envs.pddl.PddlEnv``) with alfworld's
``AlfredDemangler`` (the names the game shows, ``desk 1``), exactly what alfworld's
``AlfredTWEnv`` plays, without its config loader (which needs torch and yaml) and without its
expert: the expert's helpers are known to raise on some action sequences (alfworld issue #128)
and are never asked for here. An engine exception on one step is caught and becomes that
step's observation, so the engine's own faults never end a run (the TextWorld issue #366 kind);
the engine may have changed its state half-way before it raised, so the game is then restored
to the state before the step (the engine is deterministic: reloaded, and the earlier commands
played again), and the faulting action has no effect.

Speed: each step derives the text of every action possible next from the game's grammar;
TextWorld parses the same few strings again and deep-copies contexts for each derivation (most of
a step's time). :func:`speed_up_engine` keeps each parse tree and copies contexts one level deep,
and the observations are the same text (``tests/test_alfworld_env.py`` compares them step by
step; ``benchmarks/alfworld_env.py`` on whole expert plans).
"""

from __future__ import annotations

import functools
import hashlib
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ENGINE_BROKEN", "ENGINE_FAULT", "Game", "StepResult", "speed_up_engine"]

_ORIGINALS: dict[str, Callable[..., Any]] = {}
"""TextWorld's own functions that :func:`speed_up_engine` replaced, by ``module.name``."""


def speed_up_engine(enabled: bool = True) -> bool:
    """Make TextWorld's text generation cheaper in this process (or restore it), changing no
    observation.

    Each step derives the text of every action possible next from the game's grammar. TextWorld
    then parses the same few grammar and logic strings again for each derivation, and deep-copies
    each derivation's context, entity descriptions included, although a derivation only adds
    entries to the copy's two dictionaries. Sped up: each parse tree is kept (the tree is only
    read; the objects built from it are built afresh each time) and a context's two dictionaries
    are copied one level deep.

    Args:
        enabled: True to speed up, False to restore TextWorld's own functions.

    Returns:
        Whether the speed-up is in force (False when this TextWorld lacks the functions).
    """
    import textworld.logic as logic
    from textworld.envs.pddl import textgen

    replaced = {
        "textgen._parse_and_convert": (textgen, "_parse_and_convert", _cached_parse(textgen)),
        "logic._parse_and_convert": (logic, "_parse_and_convert", _cached_parse(logic)),
        "textgen.copy_context": (textgen, "copy_context", _copy_context),
    }
    if any(fast is None or not hasattr(module, name) for module, name, fast in replaced.values()):
        return False
    for key, (module, name, fast) in replaced.items():
        _ORIGINALS.setdefault(key, getattr(module, name))
        setattr(module, name, fast if enabled else _ORIGINALS[key])
    return enabled


def _cached_parse(module: Any) -> Callable[..., Any] | None:
    """``module._parse_and_convert`` with the parser's trees kept: the module's parser and
    converter, or None when the module has neither."""
    parser, converter = getattr(module, "_PARSER", None), getattr(module, "_ModelConverter", None)
    converter = converter or getattr(module, "_Converter", None)
    if parser is None or converter is None:
        return None

    @functools.lru_cache(maxsize=4096)
    def tree(text: str, rule_name: str, trace: bool) -> Any:
        return parser.parse(text, rule_name=rule_name, trace=trace)

    def parse_and_convert(text: str, rule_name: str = "start", trace: bool = False) -> Any:
        return converter().walk(tree(text, rule_name, trace))

    return parse_and_convert


def _copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """A derivation's context with its own ``variables`` and ``mapping`` dictionaries (what
    TextWorld's ``copy_context`` deep-copies; their values are never changed)."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


ENGINE_FAULT = "The game engine failed on this action; it had no effect."
"""The start of the observation of a step the engine raised on (the error follows)."""

ENGINE_BROKEN = "The game engine cannot go on after an earlier failure; nothing happens."
"""The observation of every step after a fault the game could not be restored from."""


@dataclass(frozen=True)
class StepResult:
    """One action's outcome.

    Attributes:
        observation: the game's feedback (``Nothing happens.`` for an invalid action).
        won: whether the game is won after it (the game's success signal, latched: once won,
            further actions have no effect, as in TextWorld's gym environments).
        fault: the engine's error when it raised on this action, else None.
    """

    observation: str
    won: bool
    fault: str | None = None


@dataclass
class Game:
    """A loaded game, stepped one command at a time (thread-safe: one step at a time).

    Attributes:
        path: the game file.
        opening: the observation after reset (the room and the goal).
        actions: commands stepped so far (invalid and faulted ones included).
        won_at: the number of actions when the game was first won; None before.
        faults: ``(action number, command, error)`` for every step the engine raised on.
        last: the last observation of a step that took effect (the opening at first).
        broken: why the game could not be restored after a fault (every later step then
            has no effect); None while it plays.
    """

    path: Path
    opening: str = ""
    actions: int = 0
    won_at: int | None = None
    faults: list[tuple[int, str, str]] = field(default_factory=list)
    last: str = ""
    broken: str | None = None
    _env: Any = None
    _played: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def load(cls, path: Path) -> Game:
        """Load and reset the game.

        Raises:
            ImportError: alfworld or textworld is not installed (the ``alfworld`` extra).
            Exception: the engine could not load the file (whatever it raised).
        """
        game = cls(path=Path(path))
        game.opening = game.last = game._reset()
        return game

    def _reset(self) -> str:
        """A fresh engine on the game file, reset; its opening observation."""
        if not _ORIGINALS:
            speed_up_engine()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        env = AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True)))
        env.load(str(self.path))
        state = env.reset()
        self._env = env
        return str(state.feedback)

    @property
    def won(self) -> bool:
        """Whether the game was won."""
        return self.won_at is not None

    def step(self, command: str) -> StepResult:
        """Play ``command``; never raises for anything the command or the engine does."""
        with self._lock:
            self.actions += 1
            if self.won:  # the episode is over: no effect, the last observation again
                return StepResult(self.last, True)
            if self.broken is not None:
                return StepResult(ENGINE_BROKEN, False, self.broken)
            try:
                state, _score, _done = self._env.step(command)
                observation, won = str(state.feedback), bool(state["won"])
            except Exception as err:  # the engine's own fault: feedback, not the end
                error = _one_line(err)
                self.faults.append((self.actions, command, error))
                self._restore()
                return StepResult(f"{ENGINE_FAULT} ({error})", False, error)
            self._played.append(command)
            self.last = observation
            if won:
                self.won_at = self.actions
            return StepResult(observation, won)

    def _restore(self) -> None:
        """Bring the engine back to the state before the faulting step: reload the game and
        play the commands that took effect again; a game that cannot be restored is broken."""
        try:
            self._reset()
            for command in self._played:
                self._env.step(command)
        except Exception as err:
            self.broken = f"the game could not be restored: {_one_line(err)}"

    def facts(self) -> list[str]:
        """The game state: every fact that holds now, as sorted text."""
        with self._lock:
            return sorted(str(fact) for fact in self._env.state["_facts"])

    def state_digest(self) -> str:
        """SHA-256 of the game state (its facts and whether it is won)."""
        text = "\n".join([*self.facts(), f"won={self.won}"])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _one_line(err: BaseException) -> str:
    """An exception as one line: its type and message."""
    return traceback.format_exception_only(type(err), err)[-1].strip()
