"""Filesystem task modules; each registers its tasks in the registry when imported.

:data:`TASK_MODULES` is the list the environment imports (see
:func:`controlscope.envs.filesystem.environment.load_tasks`). A module named here that does not
exist (yet) is skipped; a module that exists but fails to import is an error.
"""

TASK_MODULES: tuple[str, ...] = (
    "desktop",
    "desktop_template",
    "file_context",
    "file_property",
    "folder_structure",
    "legal_document",
    "papers",
    "student_database",
)
"""Module names below ``controlscope.envs.filesystem.tasks``, one per task category."""
