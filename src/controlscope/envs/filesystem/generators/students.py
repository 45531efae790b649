"""The student-record workload (paper sections 6.1 and B.2: 25, 75 and 150 students).

A workspace holds ``students/<ID>_<First>_<Last>/`` per student with ``basic_info.txt`` and
``recommendation_letter.txt``, and, on request, a roster ``roster.csv`` whose ``address`` field
contains unquoted commas for some students (paper section 6.1, "Repairing a parser").

One pool, many subsets (paper B.2: the confirmation's subsets "share the original 150-record
pool"; A.4: "fresh workload confirmation uses seeds 101-103"): :func:`student_pool` draws a
fixed pool of records (150 by default) from a *pool seed*, every record complete with its
letter; :func:`pool_subset` takes the first ``count`` records of a permutation drawn from a
*subset seed*, so a subset's students have the same files in every subset they belong to, and
for one subset seed the 25 are among the 75, which are among the 150.

Each record is drawn on its own; nothing forces how many students qualify. The English score and
the letter's rating are drawn together, with chances set so that an agent reading one file per
primitive call usually needs more than 100 calls at 75 students whichever file it reads first
(about 46% of students have an English score of at least 90, about 46% an "exceptional" letter,
about 12.7% both: the paper's 19 of 150 on average), while ``read_multiple_files`` reads all of
them in one or two calls. The selection is whatever the records give (paper 6.1: its 19 of 150
were observed). Everything is drawn from the given ``random.Random``; the same seeds give the
same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = [
    "BASIC_INFO",
    "ENGLISH_THRESHOLD",
    "LETTER",
    "POOL_SIZE",
    "ROSTER",
    "ROSTER_HEADER",
    "STUDENTS_DIR",
    "TALENT_LEVELS",
    "Student",
    "english_selected",
    "make_students",
    "pool_subset",
    "student_pool",
    "write_students",
]

STUDENTS_DIR = "students"
"""The folder holding one sub-folder per student."""
BASIC_INFO = "basic_info.txt"
"""A student's basic information (``Key: value`` lines)."""
LETTER = "recommendation_letter.txt"
"""A student's recommendation letter (prose)."""
ROSTER = "roster.csv"
"""The roster CSV in the workspace root; its address field is not quoted."""
ROSTER_HEADER = ("student_id", "name", "class", "address", "math", "english", "science", "email")
"""The roster's columns; ``address`` may contain commas, every other field never does."""
ENGLISH_THRESHOLD = 90
"""The English score an English-talent selection requires (inclusive)."""
TALENT_LEVELS = ("exceptional", "strong", "solid", "developing")
"""How a letter can rate a student's talent in English, best first."""
POOL_SIZE = 150
"""Records in a pool (the paper's "original 150-record pool", B.2)."""
# Chances of a record's (English score, letter) group: both criteria (the paper's 19 of 150),
# a high score only, an exceptional letter only; the rest meets neither.
_BOTH, _HIGH_ONLY, _LETTER_ONLY = 19 / 150, 1 / 3, 1 / 3

_FIRST_F = (
    "Alice", "Amara", "Beatriz", "Chloe", "Daria", "Elena", "Fatima", "Grace", "Hana", "Ingrid",
    "Jasmine", "Keiko", "Leila", "Maya", "Nadia", "Olivia", "Priya", "Quinn", "Rosa", "Sofia",
    "Talia", "Uma", "Valeria", "Wen", "Yara", "Zoe",
)  # fmt: skip
_FIRST_M = (
    "Aaron", "Bilal", "Carlos", "Daniel", "Emeka", "Felix", "Gabriel", "Hugo", "Ivan", "Jonas",
    "Kenji", "Liam", "Mateo", "Noah", "Omar", "Pavel", "Rafael", "Samuel", "Tomas", "Umar",
    "Victor", "William", "Xavier", "Yusuf", "Zane",
)  # fmt: skip
_LAST = (
    "Abebe", "Bauer", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito",
    "Jensen", "Kowalski", "Larsen", "Moreau", "Nakamura", "Okafor", "Petrov", "Quispe", "Rossi",
    "Santos", "Tanaka", "Usman", "Varga", "Weber", "Xu", "Yilmaz", "Zhang", "Chen", "Novak",
    "Silva", "Kim",
)  # fmt: skip
_STREETS = (
    "Maple", "Oak", "Cedar", "Birch", "Willow", "Harbor", "Mill", "Church", "Station", "Park",
    "River", "Hill", "Orchard", "Lake", "Meadow",
)  # fmt: skip
_SUFFIXES = ("Street", "Road", "Lane", "Avenue", "Way", "Close")
_CITIES = ("Riverton", "Eastbrook", "Millford", "Ashdale", "Northgate", "Lakeside")
_TEACHERS = (
    "Ms. Helen Park", "Mr. David Osei", "Dr. Irene Walsh", "Mr. Luca Bianchi", "Ms. Ruth Adler",
    "Dr. Samir Nasser", "Ms. Joanna Lis", "Mr. Peter Grant",
)  # fmt: skip
_OTHER_SUBJECTS = ("mathematics", "biology", "history", "chemistry", "music", "physics", "art")
_OTHER_PRAISE = ("exceptional", "remarkable", "steady", "improving", "careful", "outstanding")
_TRAITS = (
    "asks sharp questions in class",
    "helps classmates without being asked",
    "organised the school's charity book sale",
    "keeps a meticulous study journal",
    "led a group project on local history",
    "volunteers at the public library on weekends",
    "plays in the school orchestra",
    "joined the debate club this year",
    "mentors younger students in the reading club",
    "built a weather station for the science fair",
)


@dataclass(frozen=True)
class Student:
    """One generated student.

    Attributes:
        student_id: ``S0001``...; unique and in generation order.
        first: first name.
        last: last name (names may repeat only when duplicates were requested).
        gender: ``F`` or ``M`` (decides the letter's pronouns).
        age: years.
        klass: the class, e.g. ``11-B``.
        address: street address; sometimes with commas (``12 Oak Road, Apt 4, Riverton``).
        email: a unique address.
        math: score 0..100.
        english: score 0..100.
        science: score 0..100.
        english_talent: one of :data:`TALENT_LEVELS`, as the letter states it.
        teacher: the letter's author.
        letter: the recommendation letter's text.
    """

    student_id: str
    first: str
    last: str
    gender: str
    age: int
    klass: str
    address: str
    email: str
    math: int
    english: int
    science: int
    english_talent: str
    teacher: str
    letter: str = ""

    @property
    def name(self) -> str:
        """``First Last``."""
        return f"{self.first} {self.last}"

    @property
    def folder(self) -> str:
        """The student's folder name below :data:`STUDENTS_DIR`: ``S0001_First_Last``."""
        return f"{self.student_id}_{self.first}_{self.last}"

    @property
    def average(self) -> float:
        """Mean of the math, English and science scores."""
        return (self.math + self.english + self.science) / 3


def english_selected(student: Student) -> bool:
    """True when the student meets the English-talent criteria.

    Both must hold: the English score is at least :data:`ENGLISH_THRESHOLD`, and the letter rates
    the student's talent in English as ``exceptional`` (paper section 6.1: the selection combines
    basic information with teacher recommendations).
    """
    return student.english >= ENGLISH_THRESHOLD and student.english_talent == "exceptional"


def make_students(
    rng: random.Random,
    count: int,
    *,
    duplicate_groups: int = 0,
) -> list[Student]:
    """Draw ``count`` student records, each on its own (letters included).

    Args:
        rng: the only source of randomness.
        count: number of students, at least 1.
        duplicate_groups: number of names shared by several students (each group has two
            students, every fourth group three); 0 makes all names distinct.

    Returns:
        Students in ID order (``S0001``...). On average ``count * 19 / 150`` meet
        :func:`english_selected`; the number is whatever the draws give.

    Raises:
        ValueError: ``count`` < 1, or more duplicate students than ``count`` allows.
    """
    if count < 1:
        raise ValueError(f"need at least one student, got {count}")
    group_sizes = [3 if (i + 1) % 4 == 0 else 2 for i in range(duplicate_groups)]
    if sum(group_sizes) > count:
        raise ValueError(f"{duplicate_groups} duplicate-name groups do not fit in {count} students")

    names = _names(rng, count, group_sizes)
    emails: set[str] = set()
    students: list[Student] = []
    for index, (first, last, gender) in enumerate(names, start=1):
        base = f"{first}.{last}".lower()
        email = f"{base}@school.example"
        n = 2
        while email in emails:
            email = f"{base}{n}@school.example"
            n += 1
        emails.add(email)
        english, talent = _talent(rng)
        student = Student(
            student_id=f"S{index:04d}",
            first=first,
            last=last,
            gender=gender,
            age=rng.randint(15, 18),
            klass=f"{rng.randint(9, 12)}-{rng.choice('ABCD')}",
            address=_address(rng),
            email=email,
            math=rng.randint(48, 100),
            english=english,
            science=rng.randint(48, 100),
            english_talent=talent,
            teacher=rng.choice(_TEACHERS),
        )
        students.append(replace(student, letter=letter_text(rng, student)))
    return students


def student_pool(pool_seed: int, size: int = POOL_SIZE) -> list[Student]:
    """The fixed pool of ``size`` records that pool seed ``pool_seed`` gives (paper B.2).

    Raises:
        ValueError: ``size`` < 1.
    """
    return make_students(random.Random(pool_seed), size)


def pool_subset(pool: Sequence[Student], count: int, rng: random.Random) -> list[Student]:
    """``count`` records of ``pool`` chosen by a subset seed's ``rng``, in ID order.

    The first ``count`` records of one permutation of the pool: for one ``rng`` state, a
    smaller subset lies inside a larger one, and a record is the same in every subset.

    Raises:
        ValueError: ``count`` is not between 1 and the pool's size.
    """
    if not 1 <= count <= len(pool):
        raise ValueError(f"a subset of {count} does not fit a pool of {len(pool)} records")
    order = list(pool)
    rng.shuffle(order)
    return sorted(order[:count], key=lambda s: s.student_id)


def _names(
    rng: random.Random, count: int, group_sizes: Sequence[int]
) -> list[tuple[str, str, str]]:
    """Distinct (first, last, gender) triples, then duplicate groups spread over the list."""
    pool = [(f, last, "F") for f in _FIRST_F for last in _LAST]
    pool += [(f, last, "M") for f in _FIRST_M for last in _LAST]
    distinct = count - sum(group_sizes) + len(group_sizes)
    if distinct > len(pool):
        raise ValueError(f"at most {len(pool)} distinct names can be generated")
    chosen = rng.sample(pool, distinct)
    names = list(chosen)
    for group, size in enumerate(group_sizes):
        names.extend([chosen[group]] * (size - 1))
    rng.shuffle(names)
    return names


def _talent(rng: random.Random) -> tuple[int, str]:
    """One record's (English score, letter rating), its group drawn by the chances above."""
    draw = rng.random()
    if draw < _BOTH:
        return rng.choice((90, 91, rng.randint(90, 100))), "exceptional"
    if draw < _BOTH + _HIGH_ONLY:
        return rng.choice((90, rng.randint(90, 100))), rng.choice(TALENT_LEVELS[1:])
    if draw < _BOTH + _HIGH_ONLY + _LETTER_ONLY:
        return rng.choice((88, 89, rng.randint(62, 89))), "exceptional"
    return rng.randint(55, 89), rng.choice(TALENT_LEVELS[1:])


def _address(rng: random.Random) -> str:
    street = f"{rng.randint(1, 299)} {rng.choice(_STREETS)} {rng.choice(_SUFFIXES)}"
    city = rng.choice(_CITIES)
    shape = rng.random()
    if shape < 0.35:
        return f"{street} {city}"
    if shape < 0.75:
        return f"{street}, {city}"
    return f"{street}, Apt {rng.randint(1, 40)}, {city}"


def basic_info_text(student: Student) -> str:
    """The text of a student's ``basic_info.txt``."""
    return (
        f"Student ID: {student.student_id}\n"
        f"Name: {student.name}\n"
        f"Gender: {student.gender}\n"
        f"Age: {student.age}\n"
        f"Class: {student.klass}\n"
        f"Email: {student.email}\n"
        f"Math score: {student.math}\n"
        f"English score: {student.english}\n"
        f"Science score: {student.science}\n"
    )


def letter_text(rng: random.Random, student: Student) -> str:
    """The text of a student's recommendation letter (prose; one sentence rates English)."""
    they, their = ("she", "her") if student.gender == "F" else ("he", "his")
    subject = rng.choice(_OTHER_SUBJECTS)
    praise = rng.choice(_OTHER_PRAISE)
    trait_a, trait_b = rng.sample(_TRAITS, 2)
    rating = f"Overall, I would rate {their} talent in English as {student.english_talent}."
    body = [
        f"To the admissions committee,\n\nI have taught {student.name} for two years in "
        f"class {student.klass} and am glad to write in support of {their} application.",
        f"{they.capitalize()} {trait_a}, and {they} {trait_b}.",
        f"{their.capitalize()} work in {subject} is {praise}.",
    ]
    rng.shuffle(body)
    body.insert(rng.randint(1, len(body)), rating)
    return "\n\n".join(body) + f"\n\nSincerely,\n{student.teacher}\n"


def roster_line(student: Student) -> str:
    """One roster row; the address is written as is, commas included, without quotes."""
    fields = (
        student.student_id,
        student.name,
        student.klass,
        student.address,
        str(student.math),
        str(student.english),
        str(student.science),
        student.email,
    )
    return ",".join(fields)


def write_students(
    workspace: Path,
    students: Sequence[Student],
    *,
    roster: bool = True,
) -> None:
    """Write the student folders (and the roster) into ``workspace``.

    Args:
        workspace: an existing directory.
        students: from :func:`make_students` or :func:`pool_subset` (letters included).
        roster: also write :data:`ROSTER` (in the order given).

    Raises:
        OSError: the files cannot be written.
    """
    base = workspace / STUDENTS_DIR
    base.mkdir(exist_ok=True)
    for student in students:
        folder = base / student.folder
        folder.mkdir()
        (folder / BASIC_INFO).write_text(basic_info_text(student), encoding="utf-8")
        (folder / LETTER).write_text(student.letter, encoding="utf-8")
    if roster:
        lines = [",".join(ROSTER_HEADER), *(roster_line(s) for s in students)]
        (workspace / ROSTER).write_text("\n".join(lines) + "\n", encoding="utf-8")
