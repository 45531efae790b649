"""Desktop tasks: a music report, project management and timeline extraction (paper section 4,
appendix B: the "desktop tasks" category of the MCPMark-style filesystem suite).

Each task has a seeded generator that writes the initial workspace and returns the answer key, a
verifier that returns one check per requirement, and a reference solution that uses only tool
calls. The data, names and instructions are our own.
"""

from __future__ import annotations

import datetime
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controlscope.core import AnswerKey, Check
from controlscope.envs.filesystem.registry import FsTaskSpec, ToolCaller, register
from controlscope.envs.filesystem.tasks._taskkit import (
    check_placement,
    content_lines,
    describe,
    fail,
    files_under,
    int_param,
    join,
    list_entries,
    make_dir,
    move,
    ok,
    put,
    range_checker,
    read_many,
    read_output,
    read_text,
    tree_files,
    workspace_root,
    write_text,
)

CATEGORY = "desktop"

# =============================================================================================
# desktop/music_report
# =============================================================================================

_ARTISTS = [
    "The Low Tides",
    "Mira Castell",
    "Copper Lantern",
    "Jonah Reyes Trio",
    "Velvet Orchard",
    "Ada Nwosu",
    "North Quarry",
    "Lumen & Ash",
]
_ALBUMS = [
    "Night Ferries",
    "Paper Suns",
    "Salt Roads",
    "Quiet Engines",
    "Harbour Lights",
    "Winter Static",
    "Slow Rivers",
    "Glass Orchard",
    "Blue Hours",
    "Open Fields",
    "Small Weather",
    "Lantern Songs",
]
_TITLE_A = [
    "Golden",
    "Hollow",
    "Silver",
    "Broken",
    "Distant",
    "Electric",
    "Gentle",
    "Midnight",
    "Paper",
    "Restless",
    "Quiet",
    "Wild",
]
_TITLE_B = [
    "Harbour",
    "Signal",
    "Garden",
    "Comet",
    "Letters",
    "Tide",
    "Mirror",
    "Highway",
    "Ember",
    "Canyon",
    "Orbit",
    "Meadow",
]

MUSIC_INSTRUCTION = """\
The folder `Music/` holds a music library. Every track is one `.meta` file somewhere below \
`Music/`; it has lines `title: ...`, `artist: ...`, `album: ...`, `duration: M:SS` and \
`plays: N`. Other files (cover notes, playlists) are not tracks and must not be counted.

Write a report to `music_report.txt` at the workspace root, with exactly these lines in this \
order:
  tracks: <number of tracks>
  total_duration: <sum of all durations as H:MM:SS, e.g. 1:02:09>
  longest_track: <title> by <artist> (<its duration as M:SS>)
  top_artists:
  1. <artist> - <total plays> plays
  2. <artist> - <total plays> plays
  3. <artist> - <total plays> plays
The top artists are the three artists whose tracks have the most plays in total, highest first.
Do not modify the library."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _mss(seconds: int) -> str:
    return f"{seconds // 60}:{seconds % 60:02d}"


def _hmmss(seconds: int) -> str:
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _music_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_tracks = int_param(params, "tracks", 18, 6, 120)
    artists = rng.sample(_ARTISTS, 5)
    titles = rng.sample([f"{a} {b}" for a in _TITLE_A for b in _TITLE_B], n_tracks)
    durations = rng.sample(range(95, 480), n_tracks)
    albums_of = {a: rng.sample(_ALBUMS, 2) for a in artists}
    tracks: list[dict[str, Any]] = []
    for i in range(n_tracks):
        artist = artists[i % len(artists)] if i < len(artists) else rng.choice(artists)
        tracks.append(
            {
                "title": titles[i],
                "artist": artist,
                "album": rng.choice(albums_of[artist]),
                "duration": durations[i],
                "plays": rng.randint(0, 400),
            }
        )
    # Make every artist's total distinct so that the ranking is unambiguous.
    while True:
        totals = {a: sum(t["plays"] for t in tracks if t["artist"] == a) for a in artists}
        values = sorted(totals.values())
        if len(set(values)) == len(values):
            break
        tied = [a for a in artists if list(totals.values()).count(totals[a]) > 1]
        victim = rng.choice([t for t in tracks if t["artist"] == tied[0]])
        victim["plays"] += 1
    numbers: dict[str, int] = {}
    for t in tracks:
        folder = f"Music/{_slug(t['artist'])}/{_slug(t['album'])}"
        numbers[folder] = numbers.get(folder, 0) + 1
        put(
            workspace,
            f"{folder}/{numbers[folder]:02d}_{_slug(t['title'])}.meta",
            f"title: {t['title']}\nartist: {t['artist']}\nalbum: {t['album']}\n"
            f"duration: {_mss(t['duration'])}\nplays: {t['plays']}\n",
        )
    for folder in sorted(numbers):
        album = folder.rsplit("/", 1)[1]
        put(workspace, f"{folder}/cover.txt", f"Cover art for {album}: ink drawing, 3000x3000.\n")
    favourites = rng.sample(tracks, min(5, n_tracks))
    put(
        workspace,
        "Music/favourites.m3u",
        "#EXTM3U\n"
        + "".join(
            f"#EXTINF:{t['duration']},{t['artist']} - {t['title']}\n{_slug(t['title'])}.mp3\n"
            for t in favourites
        ),
    )
    library = {
        p.relative_to(workspace).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted((workspace / "Music").rglob("*"))
        if p.is_file()
    }
    longest = max(tracks, key=lambda t: t["duration"])
    ranking = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return {
        "tracks": n_tracks,
        "total_duration": _hmmss(sum(t["duration"] for t in tracks)),
        "longest_track": f"{longest['title']} by {longest['artist']} ({_mss(longest['duration'])})",
        "top_artists": [[a, p] for a, p in ranking],
        "library": library,
    }


def _field(lines: list[str], key: str) -> str | None:
    for line in lines:
        if line.lower().startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return None


def _music_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    text, why = read_output(workspace, "music_report.txt")
    names = ["track_count", "total_duration", "longest_track", "top_artists"]
    unchanged = check_placement(workspace, key["library"], name="library_unchanged")
    if text is None:
        return [fail("report_exists", why), *(fail(n, why) for n in names), unchanged]
    lines = [ln.strip() for ln in content_lines(text)]
    checks = [ok("report_exists")]
    for name, field, expected in [
        ("track_count", "tracks", str(key["tracks"])),
        ("total_duration", "total_duration", key["total_duration"]),
        ("longest_track", "longest_track", key["longest_track"]),
    ]:
        got = _field(lines, field)
        if got is None:
            checks.append(fail(name, f"no line starting with '{field}:'"))
        elif " ".join(got.split()) != expected:
            checks.append(fail(name, f"{field} is {got!r}, expected {expected!r}"))
        else:
            checks.append(ok(name))
    expected_top = [(str(a), int(p)) for a, p in key["top_artists"]]
    got_top: list[tuple[str, int]] = []
    for line in lines:
        m = re.fullmatch(r"(\d+)\.\s*(.+?)\s+-\s+(\d+)\s+plays", line)
        if m:
            got_top.append((m.group(2), int(m.group(3))))
    if got_top == expected_top:
        checks.append(ok("top_artists"))
    elif not got_top:
        checks.append(fail("top_artists", "no ranked lines like '1. <artist> - <n> plays'"))
    else:
        checks.append(fail("top_artists", f"ranking is {got_top}, expected {expected_top}"))
    checks.append(unchanged)
    return checks


def _music_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    tracks: list[dict[str, str]] = []
    metas = [join(root, "Music", rel) for rel in tree_files(call, join(root, "Music"))]
    for text in read_many(call, [p for p in metas if p.endswith(".meta")]).values():
        fields: dict[str, str] = {}
        for line in text.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
        tracks.append(fields)

    def secs(d: str) -> int:
        m, s = d.split(":")
        return int(m) * 60 + int(s)

    totals: dict[str, int] = {}
    for t in tracks:
        totals[t["artist"]] = totals.get(t["artist"], 0) + int(t["plays"])
    longest = max(tracks, key=lambda t: secs(t["duration"]))
    top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    lines = [
        f"tracks: {len(tracks)}",
        f"total_duration: {_hmmss(sum(secs(t['duration']) for t in tracks))}",
        f"longest_track: {longest['title']} by {longest['artist']} ({longest['duration']})",
        "top_artists:",
        *(f"{i}. {a} - {p} plays" for i, (a, p) in enumerate(top, 1)),
    ]
    write_text(call, join(root, "music_report.txt"), "\n".join(lines) + "\n")


register(
    FsTaskSpec(
        category=CATEGORY,
        name="music_report",
        instruction=MUSIC_INSTRUCTION,
        generate=_music_generate,
        verify=_music_verify,
        reference=_music_reference,
        default_params={"tracks": 18},
        check_params=range_checker({"tracks": (6, 120)}, {"tracks": 18}),
    )
)

# =============================================================================================
# desktop/project_management
# =============================================================================================

_PROJECTS = [
    ("ATL", "atlas"),
    ("BRK", "brook"),
    ("CDR", "cedar"),
    ("DUN", "dune"),
    ("EMB", "ember"),
    ("FJD", "fjord"),
]
_KINDS = {
    "code": [".py", ".sh"],
    "data": [".csv", ".json"],
    "docs": [".md", ".txt"],
    "assets": [".png", ".svg"],
}
_STEMS = [
    "ingest",
    "report",
    "summary",
    "budget",
    "schema",
    "deploy",
    "results",
    "diagram",
    "logo",
    "notes",
    "plan",
    "metrics",
    "cleanup",
    "survey",
]
_LOOSE = [
    "shopping_list.txt",
    "IMG_2041.png",
    "TAX_return_draft.md",
    "holiday_ideas.md",
    "scan_0007.png",
    "old_backup.sh",
]

PROJECT_INSTRUCTION = """\
The folder `Desktop/` is cluttered. `Desktop/projects.txt` maps three-letter project codes to \
project names (lines `CODE = name`). A desktop file belongs to a project when its name starts \
with that project's code followed by an underscore (for example `ATL_plan.md` belongs to the \
project whose code is ATL). Codes that are not listed in `projects.txt` are not projects.

Organise the project files as follows:
- for every project listed in `projects.txt`, create `Projects/<name>/` with the four \
subfolders `code`, `data`, `docs` and `assets` (even if some stay empty);
- move each project file, keeping its file name and content, into its project's subfolder by \
extension: `.py` and `.sh` into `code`, `.csv` and `.json` into `data`, `.md` and `.txt` into \
`docs`, `.png` and `.svg` into `assets`;
- leave every other file on the desktop (including `projects.txt`) untouched, and put nothing \
else under `Projects/`."""


def _pm_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_projects = int_param(params, "projects", 3, 1, 5)
    per_project = int_param(params, "files_per_project", 5, 1, 12)
    chosen = rng.sample(_PROJECTS, n_projects + 1)
    projects, unlisted = chosen[:n_projects], chosen[n_projects]
    mapping_lines = ["# project codes used in desktop file names"]
    mapping_lines += [f"{code} = {name}" for code, name in projects]
    put(workspace, "Desktop/projects.txt", "\n".join(mapping_lines) + "\n")
    exts = [(kind, ext) for kind, group in _KINDS.items() for ext in group]
    placed: dict[str, str] = {}
    moved_from: list[str] = []
    for code, name in projects:
        names = rng.sample([(s, k, e) for s in _STEMS for k, e in exts], per_project)
        for stem, kind, ext in names:
            fname = f"{code}_{stem}{ext}"
            body = f"{name} {stem} ({kind}) rev {rng.randint(1, 99)}\n"
            put(workspace, f"Desktop/{fname}", body)
            placed[f"Projects/{name}/{kind}/{fname}"] = body
            moved_from.append(f"Desktop/{fname}")
    untouched: dict[str, str] = {"Desktop/projects.txt": "\n".join(mapping_lines) + "\n"}
    loose = [*rng.sample(_LOOSE, 4), f"{unlisted[0]}_{rng.choice(_STEMS)}.md"]
    for fname in loose:
        body = f"personal file {fname} #{rng.randint(100, 999)}\n"
        put(workspace, f"Desktop/{fname}", body)
        untouched[f"Desktop/{fname}"] = body
    return {
        "projects": [name for _, name in projects],
        "placed": placed,
        "moved_from": sorted(moved_from),
        "untouched": untouched,
    }


def _pm_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    missing_dirs = [
        f"Projects/{name}/{kind}"
        for name in key["projects"]
        for kind in _KINDS
        if not (workspace / f"Projects/{name}/{kind}").is_dir()
    ]
    checks = [
        fail("project_folders", f"missing folders: {describe(missing_dirs)}")
        if missing_dirs
        else ok("project_folders"),
        check_placement(workspace, key["placed"], name="project_files_placed"),
    ]
    left = [rel for rel in key["moved_from"] if (workspace / rel).exists()]
    checks.append(
        fail("desktop_cleared", f"project files still on the desktop: {describe(left)}")
        if left
        else ok("desktop_cleared")
    )
    checks.append(check_placement(workspace, key["untouched"], name="other_files_untouched"))
    extra = files_under(workspace, "Projects") - set(key["placed"])
    checks.append(
        fail("no_extra_files", f"unexpected files under Projects/: {describe(extra)}")
        if extra
        else ok("no_extra_files")
    )
    return checks


def _pm_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    projects: dict[str, str] = {}
    for line in read_text(call, join(root, "Desktop", "projects.txt")).splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            code, name = line.split("=", 1)
            projects[code.strip()] = name.strip()
    kind_of = {ext: kind for kind, group in _KINDS.items() for ext in group}
    for name in projects.values():
        for kind in _KINDS:
            make_dir(call, join(root, "Projects", name, kind))
    for is_dir, fname in list_entries(call, join(root, "Desktop")):
        code, sep, _ = fname.partition("_")
        ext = "." + fname.rsplit(".", 1)[-1] if "." in fname else ""
        if is_dir or not sep or code not in projects or ext not in kind_of:
            continue
        move(
            call,
            join(root, "Desktop", fname),
            join(root, "Projects", projects[code], kind_of[ext], fname),
        )


register(
    FsTaskSpec(
        category=CATEGORY,
        name="project_management",
        instruction=PROJECT_INSTRUCTION,
        generate=_pm_generate,
        verify=_pm_verify,
        reference=_pm_reference,
        default_params={"projects": 3, "files_per_project": 5},
        check_params=range_checker(
            {"projects": (1, 5), "files_per_project": (1, 12)},
            {"projects": 3, "files_per_project": 5},
        ),
    )
)

# =============================================================================================
# desktop/timeline_extraction
# =============================================================================================

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_EVENTS = [
    "signed the lease for the new studio",
    "first meeting with the landscape architect",
    "kitchen renovation started",
    "passport renewal appointment",
    "sold the old car",
    "Maya's graduation ceremony",
    "booked flights to Lisbon",
    "dentist check-up",
    "started the pottery course",
    "roof inspection",
    "moved the piano to the living room",
    "returned the rented tent",
    "annual review with the bank",
    "planted the apple trees",
    "concert at the old town hall",
    "tax documents submitted",
    "bought a second-hand bike",
    "family dinner at Grandma's",
    "repaired the garden fence",
    "visited the climbing gym",
]
_UNDATED = [
    "someday: repaint the hallway",
    "maybe: learn to play the cello",
    "reminder: water the plants",
    "idea: a shelf above the desk",
]
_NOTE_FILES = ["home.txt", "travel.txt", "health.txt", "hobbies.txt", "money.txt", "family.txt"]
_PROSE = [
    "Random thoughts, written down so I do not forget them.",
    "Things were busy in 2023 and even more so the year after.",
    "Keep this list short; details live in the calendar.",
    "Some of these were planned weeks ahead, others not at all.",
]

TIMELINE_INSTRUCTION = """\
The text files in `Notes/` mix free prose with bullet lines of the form `- <when>: <event>`. \
A bullet is a dated event when `<when>` is a date written in one of three ways: `2024-03-05`, \
`March 5, 2024` or `5 Mar 2024`. Bullets whose `<when>` is not a date are not events.

Write `timeline.txt` at the workspace root with one line per dated event, in the form
  YYYY-MM-DD | <event> | <note file name>
where the date is the event's date in ISO form, `<event>` is the text after the colon (trimmed) \
and the note file name is the file it came from (for example `home.txt`). Sort the lines by date, \
then by event text. The file contains nothing else."""


def _tl_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_events = int_param(params, "events", 12, 3, 20)
    n_notes = int_param(params, "notes", 4, 1, 6)
    files = rng.sample(_NOTE_FILES, n_notes)
    days = sorted(rng.sample(range(0, 3 * 365), n_events))
    events = rng.sample(_EVENTS, n_events)
    bullets: dict[str, list[str]] = {f: [] for f in files}
    expected: list[list[str]] = []
    for i, (day, event) in enumerate(zip(days, events, strict=True)):
        year, month, dom = _date_from_index(day)
        style = rng.randrange(3)
        if style == 0:
            when = f"{year}-{month:02d}-{dom:02d}"
        elif style == 1:
            when = f"{_MONTHS[month - 1]} {dom}, {year}"
        else:
            when = f"{dom} {_MONTHS[month - 1][:3]} {year}"
        fname = files[i % n_notes] if i < n_notes else rng.choice(files)
        bullets[fname].append(f"- {when}: {event}")
        expected.append([f"{year}-{month:02d}-{dom:02d}", event, fname])
    for fname in files:
        lines = [f"Notes: {fname[:-4]}", "", rng.choice(_PROSE), ""]
        items = bullets[fname] + [f"- {rng.choice(_UNDATED)}"]
        rng.shuffle(items)
        lines += items
        lines += ["", rng.choice(_PROSE)]
        put(workspace, f"Notes/{fname}", "\n".join(lines) + "\n")
    expected.sort(key=lambda r: (r[0], r[1]))
    return {"timeline": expected}


def _date_from_index(day: int) -> tuple[int, int, int]:
    """Day ``day`` counted from 2023-01-01 as ``(year, month, day)`` (proleptic Gregorian)."""
    d = datetime.date(2023, 1, 1) + datetime.timedelta(days=day)
    return d.year, d.month, d.day


def _tl_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    names = ["line_format", "events", "sources", "order"]
    text, why = read_output(workspace, "timeline.txt")
    if text is None:
        return [fail("timeline_exists", why), *(fail(n, why) for n in names)]
    checks = [ok("timeline_exists")]
    rows: list[tuple[str, str, str]] = []
    bad: list[str] = []
    for line in content_lines(text):
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", parts[0]):
            bad.append(line)
        else:
            rows.append((parts[0], parts[1], parts[2]))
    checks.append(
        fail("line_format", f"{len(bad)} malformed line(s), e.g. {bad[0]!r}")
        if bad
        else ok("line_format")
    )
    expected = [(str(d), str(e), str(f)) for d, e, f in key["timeline"]]
    got_events = sorted((d, e) for d, e, _ in rows)
    want_events = sorted((d, e) for d, e, _ in expected)
    if got_events == want_events:
        checks.append(ok("events"))
    else:
        missing = [f"{d} {e}" for d, e in want_events if (d, e) not in got_events]
        extra = [f"{d} {e}" for d, e in got_events if (d, e) not in want_events]
        checks.append(
            fail(
                "events",
                f"{len(missing)} event(s) missing or misdated ({describe(missing, 3)}); "
                f"{len(extra)} unexpected ({describe(extra, 3)})",
            )
        )
    source = {(d, e): f for d, e, f in expected}
    wrong = [f"{e}: {f}" for d, e, f in rows if (d, e) in source and source[(d, e)] != f]
    checks.append(
        fail("sources", f"wrong note file for: {describe(wrong, 3)}") if wrong else ok("sources")
    )
    keys = [(d, e) for d, e, _ in rows]
    checks.append(
        ok("order")
        if keys == sorted(keys) and rows
        else fail("order", "lines are not sorted by date, then event")
    )
    return checks


_DATE_RES = [
    (re.compile(r"(\d{4})-(\d{2})-(\d{2})"), ("y", "m", "d")),
    (re.compile(r"([A-Z][a-z]+) (\d{1,2}), (\d{4})"), ("M", "d", "y")),
    (re.compile(r"(\d{1,2}) ([A-Z][a-z]{2}) (\d{4})"), ("d", "M", "y")),
]


def _parse_when(when: str) -> str | None:
    for pattern, order in _DATE_RES:
        m = pattern.fullmatch(when)
        if not m:
            continue
        parts = dict(zip(order, m.groups(), strict=True))
        month_names = [n[: len(parts["M"])] for n in _MONTHS] if "M" in parts else []
        month = month_names.index(parts["M"]) + 1 if "M" in parts else int(parts["m"])
        return f"{int(parts['y']):04d}-{month:02d}-{int(parts['d']):02d}"
    return None


def _tl_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    rows: list[tuple[str, str, str]] = []
    for is_dir, fname in list_entries(call, join(root, "Notes")):
        if is_dir or not fname.endswith(".txt"):
            continue
        for line in read_text(call, join(root, "Notes", fname)).splitlines():
            if not line.startswith("- ") or ": " not in line:
                continue
            when, event = line[2:].split(": ", 1)
            iso = _parse_when(when.strip())
            if iso is not None:
                rows.append((iso, event.strip(), fname))
    rows.sort(key=lambda r: (r[0], r[1]))
    write_text(call, join(root, "timeline.txt"), "".join(f"{d} | {e} | {f}\n" for d, e, f in rows))


register(
    FsTaskSpec(
        category=CATEGORY,
        name="timeline_extraction",
        instruction=TIMELINE_INSTRUCTION,
        generate=_tl_generate,
        verify=_tl_verify,
        reference=_tl_reference,
        default_params={"events": 12, "notes": 4},
        check_params=range_checker(
            {"events": (3, 20), "notes": (1, 6)}, {"events": 12, "notes": 4}
        ),
    )
)
