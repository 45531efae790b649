"""The file store, the notes app and the todo app."""

from __future__ import annotations

import datetime
import json
import posixpath
from typing import Any

from controlscope.envs.apps._api import AppError, Param, Session, api, app, paging
from controlscope.envs.apps._people import register_login

__all__ = ["normal_path", "put_file"]

# --- files ----------------------------------------------------------------------------------

app("files", "Your file store: text files in folders, addressed by absolute paths.")
register_login("files")


def normal_path(path: str) -> str:
    """``path`` made absolute and normalised (``/a/../b/`` -> ``/b``).

    Raises:
        AppError: 422 for an empty or relative path.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise AppError(422, f"{path!r} is not an absolute path (it must start with /)")
    clean = posixpath.normpath(path)
    return "/" + clean.lstrip("/")


def put_file(s: Session, path: str, content: str, *, overwrite: bool) -> None:
    """Write ``content`` at ``path`` in the user's store.

    Raises:
        AppError: 409 when the file exists and ``overwrite`` is False; 422 for a folder path.
    """
    where = normal_path(path)
    if where == "/":
        raise AppError(422, "a file needs a name")
    found = s.db.execute(
        "SELECT file_id FROM files_files WHERE owner_email = ? AND path = ?", (s.user, where)
    ).fetchone()
    if found is not None and not overwrite:
        raise AppError(409, f"{where} already exists")
    if found is not None:
        s.write(
            "UPDATE files_files SET content = ?, updated_at = ? WHERE file_id = ?",
            (content, s.now, found[0]),
        )
        return
    s.write(
        "INSERT INTO files_files (owner_email, path, content, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (s.user, where, content, s.now, s.now),
    )


def _file(s: Session, path: str) -> dict[str, Any]:
    where = normal_path(path)
    return s.row(
        "SELECT * FROM files_files WHERE owner_email = ? AND path = ?",
        (s.user, where),
        f"file {where}",
    )


@api(
    "files",
    "show_directory",
    "List the files under a folder (its subfolders included), ordered by path.",
    [Param("directory", "string", "the folder, e.g. / or /documents", required=False, default="/")],
    returns="a list of {path, size (characters), updated_at}",
    paged=True,
)
def _show_directory(
    s: Session, directory: str = "/", page_index: int = 0, page_limit: int = 5
) -> Any:
    size, offset = paging(page_index, page_limit)
    folder = normal_path(directory).rstrip("/") + "/"
    return s.rows(
        "SELECT path, length(content) AS size, updated_at FROM files_files WHERE owner_email = ?"
        " AND substr(path, 1, ?) = ? ORDER BY path LIMIT ? OFFSET ?",
        (s.user, len(folder), folder, size, offset),
    )


@api(
    "files",
    "show_file",
    "Show a file's content.",
    [Param("path", "string", "the file's absolute path")],
    returns="{path, content, created_at, updated_at}",
)
def _show_file(s: Session, path: str) -> dict[str, Any]:
    found = _file(s, path)
    return {k: found[k] for k in ("path", "content", "created_at", "updated_at")}


@api(
    "files",
    "create_file",
    "Create a file (or replace one, with overwrite).",
    [
        Param("path", "string", "the file's absolute path"),
        Param("content", "string", "its text"),
        Param("overwrite", "boolean", "replace an existing file", required=False, default=False),
    ],
    returns="{path}",
    writes=True,
)
def _create_file(s: Session, path: str, content: str, overwrite: bool = False) -> Any:
    put_file(s, path, content, overwrite=overwrite)
    return {"path": normal_path(path)}


@api(
    "files",
    "delete_file",
    "Delete a file.",
    [Param("path", "string", "the file's path")],
    returns="{message}",
    writes=True,
)
def _delete_file(s: Session, path: str) -> dict[str, str]:
    found = _file(s, path)
    s.write("DELETE FROM files_files WHERE file_id = ?", (found["file_id"],))
    return {"message": f"{found['path']} deleted"}


@api(
    "files",
    "move_file",
    "Move (or rename) a file.",
    [
        Param("source_path", "string", "the file's path"),
        Param("destination_path", "string", "its new path"),
    ],
    returns="{path}",
    writes=True,
)
def _move_file(s: Session, source_path: str, destination_path: str) -> dict[str, str]:
    found = _file(s, source_path)
    target = normal_path(destination_path)
    if s.db.execute(
        "SELECT 1 FROM files_files WHERE owner_email = ? AND path = ?", (s.user, target)
    ).fetchone():
        raise AppError(409, f"{target} already exists")
    s.write(
        "UPDATE files_files SET path = ?, updated_at = ? WHERE file_id = ?",
        (target, s.now, found["file_id"]),
    )
    return {"path": target}


# --- notes ----------------------------------------------------------------------------------

app("notes", "Your notes: a title, a text and tags each; pinned notes stay on top.")
register_login("notes")


def _note_row(row: dict[str, Any], content: bool) -> dict[str, Any]:
    out = {k: row[k] for k in ("note_id", "title", "pinned", "created_at", "updated_at")}
    out["tags"] = json.loads(row["tags"])
    out["pinned"] = bool(row["pinned"])
    if content:
        out["content"] = row["content"]
    return out


@api(
    "notes",
    "search_notes",
    "List your notes, most recently updated first; the query matches titles and texts.",
    [
        Param("query", "string", "text to look for", required=False, default=""),
        Param("tag", "string", "only notes with this tag", required=False),
        Param("pinned", "boolean", "only pinned (true) or unpinned (false) notes", required=False),
    ],
    returns="a list of {note_id, title, tags, pinned, created_at, updated_at}",
    paged=True,
)
def _search_notes(
    s: Session,
    query: str = "",
    tag: str | None = None,
    pinned: bool | None = None,
    page_index: int = 0,
    page_limit: int = 5,
) -> Any:
    size, offset = paging(page_index, page_limit)
    like = query.lower()  # a substring, not a LIKE pattern
    rows = s.rows(
        "SELECT * FROM notes_notes WHERE owner_email = ? AND (instr(lower(title), ?) OR "
        "instr(lower(content), ?)) AND (? IS NULL OR EXISTS (SELECT 1 FROM json_each(tags) "
        "WHERE value = ?)) AND (? IS NULL OR pinned = ?) "
        "ORDER BY updated_at DESC, note_id DESC LIMIT ? OFFSET ?",
        (s.user, like, like, tag, tag, pinned, pinned, size, offset),
    )
    return [_note_row(r, content=False) for r in rows]


def _note(s: Session, note_id: int) -> dict[str, Any]:
    return s.row(
        "SELECT * FROM notes_notes WHERE note_id = ? AND owner_email = ?",
        (note_id, s.user),
        f"note {note_id}",
    )


@api(
    "notes",
    "show_note",
    "Show one note with its text.",
    [Param("note_id", "integer", "the note's id")],
    returns="{note_id, title, content, tags, pinned, created_at, updated_at}",
)
def _show_note(s: Session, note_id: int) -> dict[str, Any]:
    return _note_row(_note(s, note_id), content=True)


@api(
    "notes",
    "create_note",
    "Create a note.",
    [
        Param("title", "string", "the title"),
        Param("content", "string", "the text"),
        Param("tags", "string_list", "tags", required=False, default=None),
        Param("pinned", "boolean", "pin it", required=False, default=False),
    ],
    returns="{note_id}",
    writes=True,
)
def _create_note(
    s: Session, title: str, content: str, tags: list[str] | None = None, pinned: bool = False
) -> dict[str, int]:
    new = s.write(
        "INSERT INTO notes_notes (owner_email, title, content, tags, pinned, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (s.user, title, content, json.dumps(tags or []), int(pinned), s.now, s.now),
    )
    return {"note_id": new}


@api(
    "notes",
    "update_note",
    "Change a note; fields left out keep their values.",
    [
        Param("note_id", "integer", "the note's id"),
        Param("title", "string", "the new title", required=False),
        Param("content", "string", "the new text", required=False),
        Param("tags", "string_list", "the new tags (all of them)", required=False),
        Param("pinned", "boolean", "pin or unpin it", required=False),
    ],
    returns="{message}",
    writes=True,
)
def _update_note(
    s: Session,
    note_id: int,
    title: str | None = None,
    content: str | None = None,
    tags: list[str] | None = None,
    pinned: bool | None = None,
) -> dict[str, str]:
    found = _note(s, note_id)
    s.write(
        "UPDATE notes_notes SET title = ?, content = ?, tags = ?, pinned = ?, updated_at = ? "
        "WHERE note_id = ?",
        (
            title if title is not None else found["title"],
            content if content is not None else found["content"],
            json.dumps(tags) if tags is not None else found["tags"],
            int(pinned) if pinned is not None else found["pinned"],
            s.now,
            note_id,
        ),
    )
    return {"message": f"note {note_id} updated"}


@api(
    "notes",
    "delete_note",
    "Delete a note.",
    [Param("note_id", "integer", "the note's id")],
    returns="{message}",
    writes=True,
)
def _delete_note(s: Session, note_id: int) -> dict[str, str]:
    _note(s, note_id)
    s.write("DELETE FROM notes_notes WHERE note_id = ?", (note_id,))
    return {"message": f"note {note_id} deleted"}


# --- todo -----------------------------------------------------------------------------------

app(
    "todo",
    "Your to-do lists: projects holding tasks with due dates and priorities "
    "(1 is the most urgent, 4 the least).",
)
register_login("todo")


@api(
    "todo",
    "show_projects",
    "List your projects by name.",
    returns="a list of {project_id, name, open_tasks}",
    paged=True,
)
def _show_projects(s: Session, page_index: int = 0, page_limit: int = 5) -> Any:
    size, offset = paging(page_index, page_limit)
    return s.rows(
        "SELECT p.project_id, p.name, (SELECT count(*) FROM todo_tasks t WHERE t.project_id = "
        "p.project_id AND t.completed = 0) AS open_tasks FROM todo_projects p WHERE "
        "p.owner_email = ? ORDER BY p.name, p.project_id LIMIT ? OFFSET ?",
        (s.user, size, offset),
    )


@api(
    "todo",
    "create_project",
    "Create a project.",
    [Param("name", "string", "its name")],
    returns="{project_id}",
    writes=True,
)
def _create_project(s: Session, name: str) -> dict[str, int]:
    new = s.write("INSERT INTO todo_projects (owner_email, name) VALUES (?, ?)", (s.user, name))
    return {"project_id": new}


def _project(s: Session, project_id: int) -> dict[str, Any]:
    return s.row(
        "SELECT * FROM todo_projects WHERE project_id = ? AND owner_email = ?",
        (project_id, s.user),
        f"project {project_id}",
    )


def _task_row(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "completed": bool(row["completed"])}


@api(
    "todo",
    "show_tasks",
    "List tasks ordered by due date; filters combine.",
    [
        Param("project_id", "integer", "only this project's tasks", required=False),
        Param("completed", "boolean", "only done (true) or open (false) tasks", required=False),
        Param(
            "due_before", "string", "only tasks due before this date (YYYY-MM-DD)", required=False
        ),
        Param("query", "string", "text to look for in titles", required=False, default=""),
    ],
    returns="a list of {task_id, project_id, title, due_date, priority, completed, completed_at}",
    paged=True,
)
def _show_tasks(
    s: Session,
    project_id: int | None = None,
    completed: bool | None = None,
    due_before: str | None = None,
    query: str = "",
    page_index: int = 0,
    page_limit: int = 5,
) -> Any:
    size, offset = paging(page_index, page_limit)
    rows = s.rows(
        "SELECT t.* FROM todo_tasks t JOIN todo_projects p ON p.project_id = t.project_id "
        "WHERE p.owner_email = ? AND (? IS NULL OR t.project_id = ?) AND "
        "(? IS NULL OR t.completed = ?) AND (? IS NULL OR t.due_date < ?) AND "
        "instr(lower(t.title), ?) ORDER BY t.due_date, t.task_id LIMIT ? OFFSET ?",
        (
            s.user,
            project_id,
            project_id,
            completed,
            completed,
            due_before,
            due_before,
            query.lower(),
            size,
            offset,
        ),
    )
    return [_task_row(r) for r in rows]


def _task(s: Session, task_id: int) -> dict[str, Any]:
    return s.row(
        "SELECT t.* FROM todo_tasks t JOIN todo_projects p ON p.project_id = t.project_id "
        "WHERE t.task_id = ? AND p.owner_email = ?",
        (task_id, s.user),
        f"task {task_id}",
    )


@api(
    "todo",
    "create_task",
    "Add a task to a project.",
    [
        Param("project_id", "integer", "the project's id"),
        Param("title", "string", "the title"),
        Param("due_date", "string", "when it is due (YYYY-MM-DD)"),
        Param(
            "priority",
            "integer",
            "1 (most urgent) to 4",
            required=False,
            default=4,
            minimum=1,
            maximum=4,
        ),
    ],
    returns="{task_id}",
    writes=True,
)
def _create_task(
    s: Session, project_id: int, title: str, due_date: str, priority: int = 4
) -> dict[str, int]:
    _project(s, project_id)
    _check_date(due_date)
    new = s.write(
        "INSERT INTO todo_tasks (project_id, title, due_date, priority, completed) "
        "VALUES (?, ?, ?, ?, 0)",
        (project_id, title, due_date, priority),
    )
    return {"task_id": new}


def _check_date(text: str) -> None:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        raise AppError(422, f"{text!r} is not a date in the form YYYY-MM-DD") from None


@api(
    "todo",
    "update_task",
    "Change a task; fields left out keep their values.",
    [
        Param("task_id", "integer", "the task's id"),
        Param("title", "string", "the new title", required=False),
        Param("due_date", "string", "the new due date (YYYY-MM-DD)", required=False),
        Param(
            "priority", "integer", "the new priority (1 to 4)", required=False, minimum=1, maximum=4
        ),
        Param("project_id", "integer", "move it to this project", required=False),
    ],
    returns="{message}",
    writes=True,
)
def _update_task(
    s: Session,
    task_id: int,
    title: str | None = None,
    due_date: str | None = None,
    priority: int | None = None,
    project_id: int | None = None,
) -> dict[str, str]:
    found = _task(s, task_id)
    if due_date is not None:
        _check_date(due_date)
    if project_id is not None:
        _project(s, project_id)
    s.write(
        "UPDATE todo_tasks SET title = ?, due_date = ?, priority = ?, project_id = ? "
        "WHERE task_id = ?",
        (
            title or found["title"],
            due_date or found["due_date"],
            priority or found["priority"],
            project_id or found["project_id"],
            task_id,
        ),
    )
    return {"message": f"task {task_id} updated"}


@api(
    "todo",
    "mark_task_done",
    "Mark a task done.",
    [Param("task_id", "integer", "the task")],
    returns="{message}",
    writes=True,
)
def _mark_done(s: Session, task_id: int) -> dict[str, str]:
    found = _task(s, task_id)
    if found["completed"]:
        raise AppError(409, f"task {task_id} is already done")
    s.write(
        "UPDATE todo_tasks SET completed = 1, completed_at = ? WHERE task_id = ?", (s.now, task_id)
    )
    return {"message": f"task {task_id} done"}


@api(
    "todo",
    "delete_task",
    "Delete a task.",
    [Param("task_id", "integer", "the task")],
    returns="{message}",
    writes=True,
)
def _delete_task(s: Session, task_id: int) -> dict[str, str]:
    _task(s, task_id)
    s.write("DELETE FROM todo_tasks WHERE task_id = ?", (task_id,))
    return {"message": f"task {task_id} deleted"}
