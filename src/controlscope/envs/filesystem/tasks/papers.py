"""Paper-collection tasks: author folders, finding one paper, organising legacy papers.

Our own tasks of the kinds in the ``papers`` category of the paper's 24-task filesystem suite
(paper section 4; appendix B.1 reports author-folder and legacy-paper runs). Papers are small
HTML-like files whose metadata sits in ``<meta name="citation_...">`` tags, or legacy text files
with a metadata header in one of two older styles.
"""

from __future__ import annotations

import html
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controlscope.core import AnswerKey, Check
from controlscope.envs.filesystem.registry import FsTaskSpec, ToolCaller, register
from controlscope.envs.filesystem.tasks._taskkit import (
    check_placement,
    describe,
    distinct,
    fail,
    files_under,
    int_param,
    join,
    list_entries,
    make_dir,
    missing_output,
    move,
    ok,
    parse_csv,
    put,
    range_checker,
    read_output,
    read_text,
    workspace_root,
    write_text,
)

CATEGORY = "papers"

_FIRST = ("Ada", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun")
_LAST = ("Moreno", "Okafor", "Lindqvist", "Tanaka", "Petrov", "Haddad", "Silva", "Novak", "Wei")
_ADJ = ("Sparse", "Robust", "Adaptive", "Scalable", "Efficient", "Federated", "Causal", "Bayesian")
_TOPIC = (
    "Attention",
    "Graph Embeddings",
    "Query Planning",
    "Index Structures",
    "Contrastive Learning",
    "Streaming Joins",
    "Active Learning",
    "Image Segmentation",
)
_APPL = (
    "Tabular Forecasting",
    "Medical Imaging",
    "Log Analysis",
    "Speech Translation",
    "Recommendation",
    "Traffic Prediction",
    "Entity Matching",
    "Code Search",
)
_FILLER = (
    "We study {t} in the setting of {a}.",
    "Our method builds on recent work on {t} and needs little tuning.",
    "Experiments on three public benchmarks show consistent gains.",
    "We release our code and data to support further work.",
    "The approach scales to large collections without extra memory.",
    "An ablation study isolates the effect of each component.",
    "We discuss limitations and directions for follow-up studies.",
)


def _titles(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct paper titles without commas."""
    return distinct(
        count, lambda: f"{rng.choice(_ADJ)} {rng.choice(_TOPIC)} for {rng.choice(_APPL)}"
    )


def _authors(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct ``First Last`` names."""
    return distinct(count, lambda: f"{rng.choice(_FIRST)} {rng.choice(_LAST)}")


def _abstract(rng: random.Random, title: str, extra: list[str] | None = None) -> str:
    topic, appl = title.split(" for ", 1)
    sentences = [s.format(t=topic.lower(), a=appl.lower()) for s in rng.sample(_FILLER, 3)]
    for s in extra or []:
        sentences.insert(rng.randrange(1, len(sentences) + 1), s)
    return " ".join(sentences)


def _arxiv_ids(rng: random.Random, years: list[int]) -> list[str]:
    """Distinct arXiv-like file names ``YYMM.NNNNN.html`` for papers of the given years."""
    out: list[str] = []
    for year in years:
        while True:
            name = f"{year % 100:02d}{rng.randint(1, 12):02d}.{rng.randint(10000, 99999)}.html"
            if name not in out:
                out.append(name)
                break
    return out


def _html_paper(title: str, authors: list[str], year: int, venue: str, abstract: str) -> str:
    """One paper as an HTML page with ``citation_*`` meta tags."""
    meta = [f'<meta name="citation_title" content="{html.escape(title)}">']
    meta += [f'<meta name="citation_author" content="{html.escape(a)}">' for a in authors]
    meta.append(f'<meta name="citation_publication_date" content="{year}">')
    meta.append(f'<meta name="citation_conference_title" content="{venue}">')
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        + "\n".join(meta)
        + f"\n<title>{html.escape(title)}</title>\n</head>\n<body>\n"
        + f'<h1>{html.escape(title)}</h1>\n<p class="abstract">{html.escape(abstract)}</p>\n'
        + "</body>\n</html>\n"
    )


_META = re.compile(r'<meta\s+name="citation_(\w+)"\s+content="([^"]*)"\s*/?>')


def _meta(text: str) -> dict[str, list[str]]:
    """The ``citation_*`` meta values of an HTML paper, by field (``author`` may repeat)."""
    out: dict[str, list[str]] = {}
    for field, value in _META.findall(text):
        out.setdefault(field, []).append(html.unescape(value))
    return out


# ---------------------------------------------------------------------------------------------
# papers/author_folders
# ---------------------------------------------------------------------------------------------

_AUTHOR_INSTRUCTION = """\
The directory `papers/` holds research papers as HTML files; each paper's authors are given by \
its `<meta name="citation_author" content="...">` tags. For every author who appears on at least \
two papers, create a directory `by_author/NAME/`, where NAME is the author's full name with each \
space replaced by an underscore (for example `by_author/Ada_Moreno/`), and put into it a copy of \
each of that author's papers with the same file name. Authors of a single paper get no directory. \
Leave `papers/` unchanged."""


def _folder(author: str) -> str:
    return author.replace(" ", "_")


def _generate_authors(rng: random.Random, ws: Path, params: Mapping[str, Any]) -> AnswerKey:
    count = int_param(params, "papers", 12, 8, 40)
    pool = _authors(rng, 8)
    singles: list[str] = []
    while len(singles) < 2:  # two authors who appear on exactly one paper
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        if name not in pool and name not in singles:
            singles.append(name)
    years = [rng.randint(2015, 2024) for _ in range(count)]
    names = _arxiv_ids(rng, years)
    titles = _titles(rng, count)
    single_slots = rng.sample(range(count), 2)
    files: dict[str, str] = {}
    by_author: dict[str, list[str]] = {}
    for i, (name, title, year) in enumerate(zip(names, titles, years, strict=True)):
        authors = rng.sample(pool, rng.randint(1, 3))
        if i in single_slots:
            authors.insert(rng.randrange(len(authors) + 1), singles[single_slots.index(i)])
        for a in authors:
            by_author.setdefault(a, []).append(name)
        venue = rng.choice(("ICML", "KDD", "ACL", "CVPR"))
        files[f"papers/{name}"] = _html_paper(title, authors, year, venue, _abstract(rng, title))
    for rel, text in files.items():
        put(ws, rel, text)
    folders = {
        _folder(a): sorted(papers) for a, papers in sorted(by_author.items()) if len(papers) >= 2
    }
    return {"files": files, "folders": folders, "single_authors": sorted(singles)}


def _verify_authors(ws: Path, key: AnswerKey) -> list[Check]:
    files: dict[str, str] = key["files"]
    folders: dict[str, list[str]] = key["folders"]
    checks: list[Check] = []
    base = ws / "by_author"
    present = {p.name for p in base.iterdir() if p.is_dir()} if base.is_dir() else set()
    missing = set(folders) - present
    checks.append(
        fail("author_directories", f"missing: {describe(f'by_author/{m}/' for m in missing)}")
        if missing
        else ok("author_directories", f"all {len(folders)} author directories exist")
    )
    extra = present - set(folders)
    checks.append(
        fail(
            "no_extra_directories",
            f"should not exist: {describe(f'by_author/{e}/' for e in extra)}",
        )
        if extra
        else ok("no_extra_directories", "no directory for single-paper authors or unknown names")
    )
    wrong: list[str] = []
    for folder, papers in sorted(folders.items()):
        if folder not in present:
            continue
        found = {p.rsplit("/", 1)[-1] for p in files_under(ws, f"by_author/{folder}")}
        if found != set(papers):
            lost, added = set(papers) - found, found - set(papers)
            detail = ", ".join(
                s
                for s in (
                    f"missing {describe(lost)}" if lost else "",
                    f"unexpected {describe(added)}" if added else "",
                )
                if s
            )
            wrong.append(f"by_author/{folder}/: {detail}")
    if missing:
        wrong.append(f"{len(missing)} author directories are missing")
    checks.append(
        fail("directory_contents", "; ".join(wrong[:4]))
        if wrong
        else ok("directory_contents", "each author directory holds exactly their papers")
    )
    copies = {
        f"by_author/{folder}/{p}": files[f"papers/{p}"]
        for folder, papers in folders.items()
        if folder in present
        for p in papers
    }
    copied = check_placement(ws, copies, name="copies_identical")
    if not copies:
        copied = fail("copies_identical", "no copied paper found")
    checks.append(copied)
    checks.append(check_placement(ws, files, name="papers_unchanged"))
    return checks


def _reference_authors(call: ToolCaller) -> None:
    root = workspace_root(call)
    papers: dict[str, str] = {}
    by_author: dict[str, list[str]] = {}
    for is_dir, name in list_entries(call, join(root, "papers")):
        if is_dir or not name.endswith(".html"):
            continue
        papers[name] = read_text(call, join(root, "papers", name))
        for author in _meta(papers[name]).get("author", []):
            by_author.setdefault(author, []).append(name)
    for author, names in sorted(by_author.items()):
        if len(names) < 2:
            continue
        folder = join(root, "by_author", _folder(author))
        make_dir(call, folder)
        for name in names:
            write_text(call, join(folder, name), papers[name])


register(
    FsTaskSpec(
        category=CATEGORY,
        name="author_folders",
        instruction=_AUTHOR_INSTRUCTION,
        generate=_generate_authors,
        verify=_verify_authors,
        reference=_reference_authors,
        default_params={"papers": 12},
        check_params=range_checker({"papers": (8, 40)}, {"papers": 12}),
    )
)

# ---------------------------------------------------------------------------------------------
# papers/find_math_paper
# ---------------------------------------------------------------------------------------------

_MATH_INSTRUCTION = """\
Exactly one paper in `papers/` fits this description: it has a single author, it was published \
in 2019 or later (see its `citation_publication_date` meta tag), and its abstract states a \
theorem about prime numbers (the abstract contains both the word `theorem` and the word \
`prime`). Rename that paper to `papers/answer.html`, keeping its content unchanged, and leave \
every other paper as it is."""

_THEOREM = "Our main theorem gives a new upper bound on the gap between consecutive prime numbers."
_PRIME = "As a corollary every interval of this length contains a prime."
_THEOREM_ONLY = "Our main theorem bounds the error of the estimator in terms of the sample size."
_PRIME_ONLY = "The prime motivation is to reduce labelling costs."
_MATH_TITLES = (
    "On Gaps Between Consecutive Primes",
    "A Note on Short Intervals and Primes",
    "Prime Constellations Revisited",
)
_MATH_FILLER = (
    "The proof combines sieve methods with a new mean value estimate.",
    "We also discuss what the method cannot reach.",
    "Numerical checks up to ten billion agree with the bound.",
)


def _math_abstract(rng: random.Random, title: str, theorem: bool, prime: bool) -> str:
    """An abstract that contains the words ``theorem`` / ``prime`` exactly as asked."""
    if theorem and prime:
        extra = [_THEOREM, _PRIME] if rng.random() < 0.5 else [_THEOREM]
        return " ".join([*extra, *rng.sample(_MATH_FILLER, 2)])
    extra = [_THEOREM_ONLY] if theorem else [_PRIME_ONLY] if prime else []
    return _abstract(rng, title, extra)


def _generate_math(rng: random.Random, ws: Path, params: Mapping[str, Any]) -> AnswerKey:
    del params
    # (single author, recent, theorem, prime) for the target and four near misses, then fillers.
    kinds = [
        (True, True, True, True),
        (False, True, True, True),
        (True, False, True, True),
        (True, True, False, True),
        (True, True, True, False),
    ]
    kinds += [(rng.random() < 0.5, rng.random() < 0.5, False, False) for _ in range(7)]
    rng.shuffle(kinds)
    years = [
        rng.randint(2019, 2025) if recent else rng.randint(2010, 2018) for _, recent, _, _ in kinds
    ]
    names = _arxiv_ids(rng, years)
    titles = _titles(rng, len(kinds))
    pool = _authors(rng, 8)
    files: dict[str, str] = {}
    target = ""
    for (single, _, theorem, prime), name, title, year in zip(
        kinds, names, titles, years, strict=True
    ):
        authors = rng.sample(pool, 1 if single else rng.randint(2, 4))
        if theorem and prime:
            title = rng.choice(_MATH_TITLES)
        abstract = _math_abstract(rng, title, theorem, prime)
        rel = f"papers/{name}"
        venue = "JNT" if theorem and prime else rng.choice(("ICML", "KDD", "COLT", "STOC"))
        files[rel] = _html_paper(title, authors, year, venue, abstract)
        if single and theorem and prime and year >= 2019:
            target = rel
    for rel, text in files.items():
        put(ws, rel, text)
    return {"files": files, "target": target}


def _verify_math(ws: Path, key: AnswerKey) -> list[Check]:
    files: dict[str, str] = key["files"]
    target: str = key["target"]
    checks: list[Check] = []
    text, why = read_output(ws, "papers/answer.html")
    if text is None:
        checks += missing_output("papers/answer.html", why, "answer_file", ("right_paper",))
    else:
        checks.append(ok("answer_file", "papers/answer.html exists"))
        if text == files[target]:
            checks.append(ok("right_paper", "answer.html is the described paper, unchanged"))
        else:
            same = [r for r, t in files.items() if text == t]
            what = f"it is {same[0]}" if same else "its content matches no original paper"
            checks.append(fail("right_paper", f"answer.html is not {target}: {what}"))
    checks.append(
        fail("renamed_not_copied", f"{target} still exists under its old name")
        if (ws / target).exists()
        else ok("renamed_not_copied", f"{target} was renamed")
    )
    others = {rel: t for rel, t in files.items() if rel != target}
    checks.append(check_placement(ws, others, name="other_papers_unchanged"))
    extra = files_under(ws, "papers") - set(files) - {"papers/answer.html"}
    checks.append(
        fail("no_extra_files", f"unexpected files: {describe(extra)}")
        if extra
        else ok("no_extra_files", "no other file added")
    )
    return checks


def _reference_math(call: ToolCaller) -> None:
    root = workspace_root(call)
    for is_dir, name in list_entries(call, join(root, "papers")):
        if is_dir or not name.endswith(".html"):
            continue
        text = read_text(call, join(root, "papers", name))
        meta = _meta(text)
        match = re.search(r'<p class="abstract">(.*?)</p>', text, re.DOTALL)
        abstract = html.unescape(match.group(1)).lower() if match else ""
        year = int(meta.get("publication_date", ["0"])[0][:4])
        words = set(re.findall(r"[a-z]+", abstract))
        if len(meta.get("author", [])) == 1 and year >= 2019 and {"theorem", "prime"} <= words:
            move(call, join(root, "papers", name), join(root, "papers", "answer.html"))
            return
    raise RuntimeError("no paper fits the description")


register(
    FsTaskSpec(
        category=CATEGORY,
        name="find_math_paper",
        instruction=_MATH_INSTRUCTION,
        generate=_generate_math,
        verify=_verify_math,
        reference=_reference_math,
    )
)

# ---------------------------------------------------------------------------------------------
# papers/organize_legacy_papers
# ---------------------------------------------------------------------------------------------

_VENUES = ("ICML", "ACL", "CVPR", "KDD", "SIGMOD")

_LEGACY_INSTRUCTION = """\
The directory `legacy/` holds old papers as text files. Each starts with a metadata header in \
one of two styles: lines `Key: value` (for example `Year: 2009`), or lines `% key = value` (for \
example `% venue = icml`). Move every paper to `organized/YEAR/VENUE/`, keeping its file name, \
where YEAR is its publication year and VENUE its venue written in upper case (for example \
`organized/2009/ICML/`). Then write `organized/index.csv` with the header line \
`year,venue,title,file` and one row per paper (venue in upper case, file = the file name), \
sorted by year, then venue, then file name. Do not change the papers' content; no paper should \
remain in `legacy/`."""


def _legacy_paper(rng: random.Random, title: str, authors: list[str], year: int, venue: str) -> str:
    abstract = _abstract(rng, title)
    if rng.random() < 0.5:
        head = f"Title: {title}\nAuthors: {'; '.join(authors)}\nYear: {year}\nVenue: {venue}\n"
    else:
        head = (
            "% legacy bibliography record\n"
            f"% title = {title}\n% author = {' and '.join(authors)}\n"
            f"% year = {year}\n% venue = {venue.lower()}\n"
        )
    return f"{head}\n{abstract}\n"


def _generate_legacy(rng: random.Random, ws: Path, params: Mapping[str, Any]) -> AnswerKey:
    count = int_param(params, "papers", 14, 8, 40)
    titles = _titles(rng, count)
    pool = _authors(rng, 8)
    files: dict[str, str] = {}
    rows: list[tuple[str, str, str, str]] = []
    moves: dict[str, str] = {}
    used: set[str] = set()
    for title in titles:
        year = rng.randint(2003, 2012)
        venue = rng.choice(_VENUES)
        while True:
            stem = "".join(w[0] for w in title.split() if w != "for").lower()
            name = f"{stem}_{year % 100:02d}{rng.randint(1, 99):02d}.txt"
            if name not in used:
                used.add(name)
                break
        files[f"legacy/{name}"] = _legacy_paper(rng, title, rng.sample(pool, 2), year, venue)
        moves[f"legacy/{name}"] = f"organized/{year}/{venue}/{name}"
        rows.append((str(year), venue, title, name))
    for rel, text in files.items():
        put(ws, rel, text)
    rows.sort(key=lambda r: (r[0], r[1], r[3]))
    return {"files": files, "moves": moves, "rows": [list(r) for r in rows]}


def _verify_legacy(ws: Path, key: AnswerKey) -> list[Check]:
    files: dict[str, str] = key["files"]
    moves: dict[str, str] = key["moves"]
    checks: list[Check] = []
    placed = {dst: files[src] for src, dst in moves.items()}
    checks.append(check_placement(ws, placed, name="papers_placed"))
    left = files_under(ws, "legacy") & set(files)
    checks.append(
        fail("legacy_emptied", f"papers still in legacy/: {describe(left)}")
        if left
        else ok("legacy_emptied", "no paper left in legacy/")
    )
    extra = files_under(ws, "organized") - set(placed) - {"organized/index.csv"}
    checks.append(
        fail("no_stray_files", f"unexpected files under organized/: {describe(extra)}")
        if extra
        else ok("no_stray_files", "organized/ holds only the papers and the index")
    )
    text, why = read_output(ws, "organized/index.csv")
    if text is None:
        return [
            *checks,
            fail("index_header", why),
            fail("index_rows", why),
            fail("index_order", why),
        ]
    rows = parse_csv(text)
    if rows and [c.lower() for c in rows[0]] == ["year", "venue", "title", "file"]:
        checks.append(ok("index_header", "year,venue,title,file"))
        rows = rows[1:]
    else:
        found = ",".join(rows[0]) if rows else "nothing"
        checks.append(fail("index_header", f"expected `year,venue,title,file`, found `{found}`"))
    want: list[list[str]] = key["rows"]
    got = [r for r in rows if len(r) == 4]
    missing = [r for r in want if r not in got]
    bad = [r for r in rows if r not in want]
    if missing or bad:
        parts = []
        if missing:
            parts.append(f"missing or wrong rows for: {describe(r[3] for r in missing)}")
        if bad:
            parts.append(f"{len(bad)} rows match no paper (first: {','.join(bad[0])})")
        checks.append(fail("index_rows", "; ".join(parts)))
    else:
        checks.append(ok("index_rows", f"{len(want)} rows, all right"))
    if got == want:
        checks.append(ok("index_order", "sorted by year, venue, file"))
    else:
        checks.append(
            fail("index_order", "rows are not exactly the papers sorted by year, venue, file")
        )
    return checks


_KEY_LINE = re.compile(r"^(?:%\s*)?([A-Za-z]+)\s*(?::|=)\s*(.+?)\s*$")


def _legacy_header(text: str) -> dict[str, str]:
    """The metadata header of a legacy paper (lower-case keys), up to the first blank line."""
    out: dict[str, str] = {}
    for line in text.split("\n"):
        if not line.strip():
            break
        match = _KEY_LINE.match(line.strip())
        if match:
            out.setdefault(match.group(1).lower(), match.group(2))
    return out


def _reference_legacy(call: ToolCaller) -> None:
    root = workspace_root(call)
    rows: list[tuple[str, str, str, str]] = []
    made: set[tuple[str, str]] = set()
    for is_dir, name in list_entries(call, join(root, "legacy")):
        if is_dir:
            continue
        src = join(root, "legacy", name)
        head = _legacy_header(read_text(call, src))
        year, venue = head["year"], head["venue"].upper()
        if (year, venue) not in made:
            make_dir(call, join(root, "organized", year, venue))
            made.add((year, venue))
        move(call, src, join(root, "organized", year, venue, name))
        rows.append((year, venue, head["title"], name))
    rows.sort(key=lambda r: (r[0], r[1], r[3]))
    body = "".join(",".join(r) + "\n" for r in rows)
    write_text(call, join(root, "organized", "index.csv"), "year,venue,title,file\n" + body)


register(
    FsTaskSpec(
        category=CATEGORY,
        name="organize_legacy_papers",
        instruction=_LEGACY_INSTRUCTION,
        generate=_generate_legacy,
        verify=_verify_legacy,
        reference=_reference_legacy,
        default_params={"papers": 14},
        check_params=range_checker({"papers": (8, 40)}, {"papers": 14}),
    )
)
