"""Seeded workload generators for filesystem tasks: student records and file organisation."""

from controlscope.envs.filesystem.generators.file_organisation import (
    GeneratedFile,
    make_file_tree,
    size_band,
)
from controlscope.envs.filesystem.generators.students import (
    Student,
    english_selected,
    make_students,
    write_students,
)

__all__ = [
    "GeneratedFile",
    "Student",
    "english_selected",
    "make_file_tree",
    "make_students",
    "size_band",
    "write_students",
]
