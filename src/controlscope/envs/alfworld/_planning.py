"""What the ALFWorld environment tells the planner: how the tools reach the household, and one
worked example (small models need one, or they redefine the tools)."""

from __future__ import annotations

from controlscope.core import PlannerFormat

PLANNER_NOTE = (
    "The household is reachable ONLY through these functions: each call is one action in the "
    "game (invalid ones count too) and returns what you observe. Name objects and receptacles "
    "exactly as the game does, e.g. 'apple 1', 'countertop 2'. You can hold one object at a "
    "time; open a closed receptacle before you take from it or put in it."
)
"""The system prompt's note on how the tools reach the environment."""


def planner_example(fmt: PlannerFormat) -> str:
    """A worked example: a plan as one program, with the game's feedback."""

    def block(code: str) -> str:
        if fmt == "tools":
            return f"[calls execute_python with code:]\n{code}"
        return f"```python\n{code}\n```"

    plan = (
        'print(go_to(receptacle="cabinet 1"))\n'
        'print(open(receptacle="cabinet 1"))\n'
        'print(take(object="mug 1", receptacle="cabinet 1"))\n'
        'print(go_to(receptacle="coffeemachine 1"))\n'
        'print(put(object="mug 1", receptacle="coffeemachine 1"))'
    )
    return (
        "\nExample.\n"
        "Task: You are in the middle of a room. Looking quickly around you, you see a cabinet "
        "1, a coffeemachine 1, and a countertop 1.\n\nYour task is to: put a mug in "
        "coffeemachine.\n"
        f"Assistant:\n{block(plan)}\n"
        "Output: You arrive at cabinet 1. The cabinet 1 is closed.\nYou open the cabinet 1. "
        "The cabinet 1 is open. In it, you see a mug 1.\nYou pick up the mug 1 from the "
        "cabinet 1.\nYou arrive at coffeemachine 1. On the coffeemachine 1, you see nothing.\n"
        "You put the mug 1 in/on the coffeemachine 1.\n"
        "Assistant: Done: the mug is in the coffeemachine.\n"
    )
