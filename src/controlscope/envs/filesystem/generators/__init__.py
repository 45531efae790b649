"""Seeded workload generators for filesystem tasks: student records and file organisation."""

from controlscope.envs.filesystem.generators.file_organisation import (
    GeneratedFile,
    make_file_tree,
    size_band,
)
from controlscope.envs.filesystem.generators.students import (
    POOL_SIZE,
    Student,
    english_selected,
    make_students,
    pool_subset,
    student_pool,
    write_students,
)

__all__ = [
    "POOL_SIZE",
    "GeneratedFile",
    "Student",
    "english_selected",
    "make_file_tree",
    "make_students",
    "pool_subset",
    "size_band",
    "student_pool",
    "write_students",
]
