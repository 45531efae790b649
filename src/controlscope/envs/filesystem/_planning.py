"""What the filesystem environment tells the planner and the schedules about its tools."""

from __future__ import annotations

import re

from controlscope.core import PlannerFormat

WRITE_TOOLS: frozenset[str] = frozenset(
    {"write_file", "edit_file", "move_file", "create_directory"}
)
"""The filesystem server's writing tools (a "writer block" of the local rule, paper appendix B)."""

READ_TOOLS: frozenset[str] = frozenset(
    {
        "read_file",
        "read_text_file",
        "read_media_file",
        "read_multiple_files",
        "list_directory",
        "list_directory_with_sizes",
        "directory_tree",
        "search_files",
        "get_file_info",
        "list_allowed_directories",
    }
)
"""The filesystem server's information-returning tools (a "read block" of the local rule)."""

LOCAL_FILE_HINT = (
    "Note: the task's files are not on the machine that runs your code; open(), os and pathlib "
    "cannot see them. Read and write them with the tool functions (read_text_file, write_file...)."
)
"""Appended to the receipt of a block that failed looking for the task's files locally."""

_LOCAL_FILE_ERROR = re.compile(r"^(FileNotFoundError|PermissionError|IsADirectoryError)\b", re.M)


def error_hint(error: str) -> str | None:
    """:data:`LOCAL_FILE_HINT` when a block's traceback shows a local file lookup, else None."""
    return LOCAL_FILE_HINT if _LOCAL_FILE_ERROR.search(error) else None


def planner_example(fmt: PlannerFormat) -> str:
    """A two-turn worked example with the filesystem tools (look first, then act)."""

    def block(code: str) -> str:
        if fmt == "tools":
            return f"[calls execute_python with code:]\n{code}"
        return f"```python\n{code}\n```"

    first = 'listing = list_directory(path="/data/notes")\nprint(listing)'
    second = (
        'names = [line[7:] for line in listing.splitlines() if line.startswith("[FILE] ")]\n'
        'rows = ["name,words"]\n'
        "for name in names:\n"
        '    text = read_text_file(path="/data/notes/" + name)\n'
        '    rows.append(f"{name},{len(text.split())}")\n'
        'write_file(path="/data/counts.csv", content="\\n".join(rows) + "\\n")\n'
        "print(rows)"
    )
    return (
        "\nExample (allowed directory /data).\n"
        "Task: write the word count of every file in /data/notes to /data/counts.csv.\n"
        f"Assistant:\n{block(first)}\n"
        "Output: [FILE] a.txt\n[FILE] b.txt\n"
        f"Assistant:\n{block(second)}\n"
        "Output: ['name,words', 'a.txt,12', 'b.txt,7']\n"
        "Assistant: Done: /data/counts.csv lists both files.\n"
    )
