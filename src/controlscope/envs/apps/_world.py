"""A world of apps generated from a seed: people, their accounts, and each app's data.

:func:`base_world` makes the common world of an instance (about two dozen people, the user's
contacts, money, songs, notes, tasks, files and mail, all drawn from the seed); a scenario
template then plants what its task needs (:mod:`._templates`) and :meth:`World.to_bytes` freezes
it into a SQLite database. The same seed always gives the same bytes.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sqlite3
import string
from dataclasses import dataclass, field
from typing import Any

from controlscope.envs.apps._people import LOGIN_APPS
from controlscope.envs.apps._schema import create_schema

__all__ = ["Person", "World", "base_world"]

FIRST = [
    "Ava",
    "Ben",
    "Chloe",
    "Dario",
    "Elena",
    "Farah",
    "Gus",
    "Hana",
    "Ivan",
    "Jade",
    "Kofi",
    "Lena",
    "Milo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Umar",
    "Vera",
    "Wade",
    "Xena",
    "Yuri",
    "Zoe",
    "Aaron",
    "Bea",
    "Cyrus",
    "Dina",
    "Emil",
    "Fay",
    "Gwen",
    "Hugo",
    "Iris",
    "Jonas",
    "Kira",
    "Luca",
    "Maya",
    "Nico",
]
LAST = [
    "Abbott",
    "Baker",
    "Castillo",
    "Dunn",
    "Ellis",
    "Fischer",
    "Garcia",
    "Hughes",
    "Ibarra",
    "Jensen",
    "Kowalski",
    "Lindqvist",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quist",
    "Rossi",
    "Sato",
    "Tanaka",
    "Ueda",
    "Varga",
    "Weber",
    "Xu",
    "Young",
    "Zimmer",
    "Adler",
    "Brandt",
    "Costa",
    "Duarte",
]
CITIES = ("Lisbon", "Oslo", "Austin", "Kyoto", "Nairobi", "Lyon", "Porto", "Denver", "Turin")
RELATIONSHIPS = ("friend", "family", "coworker", "roommate", "neighbour")
GENRES = ("pop", "rock", "jazz", "hip hop", "classical", "electronic", "folk", "country")
WORDS_A = [
    "Silver",
    "Quiet",
    "Electric",
    "Golden",
    "Broken",
    "Midnight",
    "Paper",
    "Velvet",
    "Wild",
    "Hollow",
    "Crimson",
    "Lucky",
    "Distant",
    "Frozen",
    "Gentle",
    "Neon",
    "Secret",
    "Restless",
    "Summer",
    "Winter",
]
WORDS_B = [
    "River",
    "Heart",
    "Engine",
    "Garden",
    "Echo",
    "Mirror",
    "Harbor",
    "Lantern",
    "Signal",
    "Orchard",
    "Comet",
    "Horizon",
    "Meadow",
    "Thunder",
    "Canvas",
    "Island",
    "Shadow",
    "Compass",
    "Feather",
    "Ember",
]
TAGS = ("work", "personal", "shopping", "recipes", "travel", "ideas", "health")
PROJECTS = ("Home", "Work", "Garden", "Travel", "Studies")
CHORES = [
    "book dentist appointment",
    "renew passport",
    "clean the gutters",
    "file expense report",
    "water the tomatoes",
    "call the landlord",
    "buy train tickets",
    "update resume",
    "fix the bike",
    "plan the budget",
    "prepare slides",
    "order printer ink",
    "return library books",
    "pay electricity bill",
    "defrost the freezer",
    "repot the ficus",
    "back up laptop",
    "reply to survey",
    "sort old photos",
    "check tyre pressure",
]
DESCRIPTIONS = (
    "dinner",
    "groceries",
    "concert tickets",
    "rent",
    "taxi",
    "coffee",
    "gift",
    "utilities",
    "lunch",
    "movie night",
    "books",
    "gym",
)


@dataclass(frozen=True)
class Person:
    """One person of the world."""

    first_name: str
    last_name: str
    email: str
    phone_number: str
    birthday: str
    city: str

    @property
    def name(self) -> str:
        """``First Last``."""
        return f"{self.first_name} {self.last_name}"


@dataclass
class World:
    """A world being built: its rows per table, the clock, the people and a random source.

    Attributes:
        seed: the seed it was drawn from.
        rng: the random source templates draw from (after the base world).
        now: the world's clock.
        people: everyone; ``people[0]`` is the user.
        rows: rows per table (integer primary keys assigned by :meth:`add`).
    """

    seed: int
    rng: random.Random
    now: dt.datetime
    people: list[Person]
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def user(self) -> Person:
        """The supervisor: the person the agent works for."""
        return self.people[0]

    def stamp(self, days: float = 0.0, hour: int | None = None) -> str:
        """The time ``days`` from now (negative: before), at ``hour`` o'clock if given."""
        when = self.now + dt.timedelta(days=days)
        if hour is not None:
            when = when.replace(hour=hour, minute=0, second=0)
        return when.isoformat(timespec="seconds")

    def date(self, days: int) -> str:
        """The date ``days`` from today (YYYY-MM-DD)."""
        return (self.now + dt.timedelta(days=days)).date().isoformat()

    def add(self, table: str, key: str | None = None, **row: Any) -> int:
        """Append a row; with ``key`` (the integer primary key's column), give it the next id.

        Returns:
            The new id (0 without ``key``).
        """
        rows = self.rows.setdefault(table, [])
        new = 0
        if key is not None:
            new = 1 + max((int(r[key]) for r in rows), default=0)
            row = {key: new, **row}
        rows.append(row)
        return new

    def table(self, name: str) -> list[dict[str, Any]]:
        """The rows of ``name`` (a live list)."""
        return self.rows.setdefault(name, [])

    def contacts(self, relationship: str | None = None) -> list[dict[str, Any]]:
        """The user's contacts (of one relationship)."""
        return [
            c
            for c in self.table("contacts_contacts")
            if relationship is None or c["relationship"] == relationship
        ]

    def person(self, email: str) -> Person:
        """The person with ``email``."""
        return next(p for p in self.people if p.email == email)

    def new_person(self) -> Person:
        """A person whose name nobody in the world has yet (added to the world)."""
        taken = {(p.first_name, p.last_name) for p in self.people}
        while True:
            first, last = self.rng.choice(FIRST), self.rng.choice(LAST)
            if (first, last) not in taken and all(p.first_name != first for p in self.people):
                break
        person = _person(self.rng, first, last, self.now)
        self.people.append(person)
        self._accounts(person)
        self.add("payments_accounts", email=person.email, balance=_money(self.rng, 100, 900))
        return person

    def _accounts(self, person: Person) -> None:
        for app_name in LOGIN_APPS:
            password = "".join(
                self.rng.choice(string.ascii_letters + string.digits) for _ in range(12)
            )
            self.add("accounts", email=person.email, app=app_name, password=password)

    def to_bytes(self) -> bytes:
        """The world as a SQLite database file's bytes."""
        db = sqlite3.connect(":memory:")
        try:
            create_schema(db)
            secret = "".join(self.rng.choice(string.hexdigits) for _ in range(32))
            meta = {
                "now": self.stamp(),
                "user": self.user.email,
                "secret": secret,
                "seed": str(self.seed),
            }
            db.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
            db.executemany(
                "INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (p.email, p.first_name, p.last_name, p.phone_number, p.birthday, p.city)
                    for p in self.people
                ],
            )
            for table, rows in self.rows.items():
                for row in rows:
                    columns = ", ".join(row)
                    marks = ", ".join("?" for _ in row)
                    db.execute(
                        f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(row.values())
                    )
            db.commit()
            return db.serialize()
        finally:
            db.close()


def _money(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)


def _person(rng: random.Random, first: str, last: str, now: dt.datetime) -> Person:
    domain = rng.choice(("mailbox.test", "post.test", "inbox.test"))
    birthday = dt.date(rng.randint(1960, 2004), rng.randint(1, 12), rng.randint(1, 28))
    return Person(
        first_name=first,
        last_name=last,
        email=f"{first}.{last}@{domain}".lower(),
        phone_number=f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
        birthday=birthday.isoformat(),
        city=rng.choice(CITIES),
    )


def base_world(seed: int) -> World:
    """The common world of ``seed``: 24 people (the user first), accounts, contacts, money,
    music, notes, tasks, files and mail.

    Args:
        seed: any integer; the same seed gives the same world.

    Returns:
        The world, ready for a template to plant its task's data.
    """
    rng = random.Random(seed)
    now = dt.datetime(2024, 3, 1, 9, 0, 0) + dt.timedelta(days=rng.randint(0, 200))
    firsts = rng.sample(FIRST, 24)
    lasts = rng.sample(LAST, 24)
    people = [_person(rng, f, last, now) for f, last in zip(firsts, lasts, strict=True)]
    world = World(seed=seed, rng=rng, now=now, people=people)
    for person in people:
        world._accounts(person)
    _contacts(world)
    _payments(world)
    _music(world)
    _notes(world)
    _todo(world)
    _files(world)
    _mail(world)
    return world


def _contacts(w: World) -> None:
    kinds = ["roommate", "roommate", "family", "family", "coworker", "coworker", "coworker"]
    kinds += [w.rng.choice(RELATIONSHIPS) for _ in range(11)]
    for person, kind in zip(w.people[1:19], kinds, strict=True):
        add_contact(w, person, kind)


def add_contact(w: World, person: Person, relationship: str) -> int:
    """Make ``person`` one of the user's contacts."""
    return w.add(
        "contacts_contacts",
        "contact_id",
        owner_email=w.user.email,
        first_name=person.first_name,
        last_name=person.last_name,
        email=person.email,
        phone_number=person.phone_number,
        relationship=relationship,
        birthday=person.birthday,
        city=person.city,
    )


def _payments(w: World) -> None:
    for person in w.people:
        low, high = (900, 2400) if person is w.user else (100, 900)
        w.add("payments_accounts", email=person.email, balance=_money(w.rng, low, high))
    contacts = w.people[1:19]
    for _ in range(26):
        other = w.rng.choice(contacts)
        mine = w.rng.random() < 0.5
        add_transaction(
            w,
            (w.user if mine else other).email,
            (other if mine else w.user).email,
            _money(w.rng, 5, 150),
            w.rng.choice(DESCRIPTIONS),
            w.stamp(-w.rng.uniform(1, 150)),
        )
    for _ in range(6):
        other = w.rng.choice(contacts)
        add_request(
            w,
            other.email,
            w.user.email,
            _money(w.rng, 5, 90),
            w.rng.choice(DESCRIPTIONS),
            w.stamp(-w.rng.uniform(1, 60)),
            w.rng.choice(("approved", "denied")),
        )


def add_transaction(
    w: World, sender: str, receiver: str, amount: float, description: str, when: str
) -> int:
    """Record a past transfer (balances stay as they are: they are the present)."""
    return w.add(
        "payments_transactions",
        "transaction_id",
        sender_email=sender,
        receiver_email=receiver,
        amount=amount,
        description=description,
        created_at=when,
    )


def add_request(
    w: World,
    requester: str,
    payer: str,
    amount: float,
    description: str,
    when: str,
    status: str = "pending",
) -> int:
    """Record a payment request."""
    resolved = None if status == "pending" else when
    return w.add(
        "payments_requests",
        "request_id",
        requester_email=requester,
        payer_email=payer,
        amount=amount,
        description=description,
        status=status,
        created_at=when,
        resolved_at=resolved,
    )


def _music(w: World) -> None:
    artists = [
        f"The {a} {b}" if w.rng.random() < 0.4 else f"{a} {b}"
        for a, b in zip(w.rng.sample(WORDS_A, 12), w.rng.sample(WORDS_B, 12), strict=True)
    ]
    genre_of = {a: w.rng.choice(GENRES) for a in artists}
    titles = [f"{a} {b}" for a in WORDS_A for b in WORDS_B]
    w.rng.shuffle(titles)
    for title in titles[:70]:
        add_song(w, title, w.rng.choice(artists), genre_of)
    songs = [s["song_id"] for s in w.table("music_songs")]
    library = w.rng.sample(songs, 26)
    for i, song in enumerate(library):
        w.add("music_library", owner_email=w.user.email, song_id=song, added_at=w.stamp(-i * 3.1))
    for i, song in enumerate(w.rng.sample(library, 9)):
        w.add("music_likes", owner_email=w.user.email, song_id=song, liked_at=w.stamp(-i * 2.3))
    for i, name in enumerate(
        w.rng.sample(("Road Trip", "Focus", "Sunday Morning", "Workout", "Rainy Day"), 3)
    ):
        add_playlist(w, name, w.rng.sample(library, w.rng.randint(4, 8)), w.stamp(-40 + i))


def add_song(w: World, title: str, artist: str, genre_of: dict[str, str] | None = None) -> int:
    """Add a song to the catalogue."""
    album = f"{w.rng.choice(WORDS_B)} {w.rng.choice(('Sessions', 'Tales', 'Days', 'Nights'))}"
    genre = (genre_of or {}).get(artist) or w.rng.choice(GENRES)
    return w.add(
        "music_songs",
        "song_id",
        title=title,
        artist=artist,
        album=album,
        genre=genre,
        duration_s=w.rng.randint(120, 420),
        release_year=w.rng.randint(1972, 2023),
        play_count=w.rng.randint(1_000, 5_000_000),
    )


def add_playlist(w: World, title: str, songs: list[int], when: str, public: bool = False) -> int:
    """Add one of the user's playlists holding ``songs`` in order."""
    new = w.add(
        "music_playlists",
        "playlist_id",
        owner_email=w.user.email,
        title=title,
        is_public=int(public),
        created_at=when,
    )
    for position, song in enumerate(songs, start=1):
        w.add("music_playlist_songs", playlist_id=new, song_id=song, position=position)
    return new


def _notes(w: World) -> None:
    for i in range(18):
        tags = w.rng.sample(TAGS, w.rng.randint(1, 2))
        title = f"{w.rng.choice(WORDS_A)} {w.rng.choice(('plan', 'list', 'thoughts', 'draft'))}"
        lines = [f"- {w.rng.choice(CHORES)}" for _ in range(w.rng.randint(2, 5))]
        add_note(w, title, "\n".join(lines), tags, w.stamp(-i * 4.2 - 1))


def add_note(
    w: World, title: str, content: str, tags: list[str], when: str, pinned: bool = False
) -> int:
    """Add one of the user's notes."""
    return w.add(
        "notes_notes",
        "note_id",
        owner_email=w.user.email,
        title=title,
        content=content,
        tags=json.dumps(tags),
        pinned=int(pinned),
        created_at=when,
        updated_at=when,
    )


def _todo(w: World) -> None:
    for name in w.rng.sample(PROJECTS, 4):
        project = w.add("todo_projects", "project_id", owner_email=w.user.email, name=name)
        for _ in range(w.rng.randint(5, 8)):
            done = w.rng.random() < 0.3
            add_task(
                w,
                project,
                w.rng.choice(CHORES),
                w.date(w.rng.randint(-30, 45)),
                w.rng.randint(1, 4),
                w.stamp(-w.rng.randint(1, 20)) if done else None,
            )


def add_task(
    w: World, project: int, title: str, due: str, priority: int, completed_at: str | None = None
) -> int:
    """Add a task to one of the user's projects (done when ``completed_at`` is given)."""
    return w.add(
        "todo_tasks",
        "task_id",
        project_id=project,
        title=title,
        due_date=due,
        priority=priority,
        completed=int(completed_at is not None),
        completed_at=completed_at,
    )


def _files(w: World) -> None:
    for i in range(14):
        folder = w.rng.choice(("/documents", "/reports", "/recipes", "/travel"))
        name = f"{w.rng.choice(WORDS_A).lower()}-{w.rng.choice(WORDS_B).lower()}-{i}.txt"
        lines = [w.rng.choice(CHORES) for _ in range(w.rng.randint(2, 6))]
        add_file(w, f"{folder}/{name}", "\n".join(lines), w.stamp(-i * 5.5 - 2))


def add_file(w: World, path: str, content: str, when: str) -> int:
    """Add a file to the user's store."""
    return w.add(
        "files_files",
        "file_id",
        owner_email=w.user.email,
        path=path,
        content=content,
        created_at=when,
        updated_at=when,
    )


def _mail(w: World) -> None:
    contacts = w.people[1:19]
    for i in range(24):
        other = w.rng.choice(contacts)
        incoming = w.rng.random() < 0.65
        subject = f"{w.rng.choice(WORDS_A)} {w.rng.choice(('update', 'plans', 'question', 'news'))}"
        body = f"Hi,\n{w.rng.choice(CHORES).capitalize()} is on my list this week.\nBest"
        sender, receiver = (other, w.user) if incoming else (w.user, other)
        add_message(
            w,
            sender.email,
            receiver.email,
            subject,
            body,
            w.stamp(-i * 2.7 - 0.5),
            read=not incoming or w.rng.random() < 0.6,
        )


def add_message(
    w: World,
    sender: str,
    recipient: str,
    subject: str,
    body: str,
    when: str,
    read: bool = True,
    attachments: dict[str, str] | None = None,
) -> int:
    """Add a message (with attachments: file name -> content)."""
    new = w.add(
        "mail_messages",
        "message_id",
        sender_email=sender,
        recipient_email=recipient,
        subject=subject,
        body=body,
        sent_at=when,
        read=int(read),
    )
    for name, content in (attachments or {}).items():
        w.add("mail_attachments", "attachment_id", message_id=new, file_name=name, content=content)
    return new
