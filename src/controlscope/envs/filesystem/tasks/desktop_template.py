"""Desktop-template tasks: budget computation, contact inference and file arrangement (paper
section 4 and appendix B: the "desktop templates" category of the MCPMark-style filesystem suite).

Each task has a seeded generator that writes the initial workspace and returns the answer key, a
verifier that returns one check per requirement, and a reference solution that uses only tool
calls. The data, names and instructions are our own.
"""

from __future__ import annotations

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
    fail,
    files_under,
    int_param,
    join,
    list_entries,
    make_dir,
    move,
    ok,
    parse_csv,
    put,
    range_checker,
    read_many,
    read_output,
    read_text,
    tree_files,
    workspace_root,
    write_lines,
)

CATEGORY = "desktop_template"

# =============================================================================================
# desktop_template/budget_computation
# =============================================================================================

_CATEGORIES = ["dining", "groceries", "health", "leisure", "transport", "utilities"]
_PLACES = {
    "dining": ["Noodle bar", "Cafe Lumen", "Pizza corner", "Street tacos"],
    "groceries": ["Corner market", "Bulk store", "Farmers market", "Bakery"],
    "health": ["Pharmacy", "Physio session", "Optician", "Vitamins"],
    "leisure": ["Cinema", "Museum pass", "Book shop", "Climbing gym"],
    "transport": ["Train ticket", "Bus pass", "Fuel", "Bike repair"],
    "utilities": ["Electricity", "Water bill", "Internet", "Phone plan"],
}

BUDGET_INSTRUCTION = """\
The folder `Expenses/` has one subfolder per month (`Expenses/2024-01/` ...). In a month folder, \
every `.txt` file except `notes.txt` lists the expenses of one category; the category is the \
file name without `.txt` (for example `groceries.txt` is the category `groceries`). Lines \
starting with `#` are comments; every other non-empty line is `<date>; <description>; <amount>`, \
where the amount may carry a leading `$` and may be negative (a refund, which reduces the total).

Write `budget.csv` at the workspace root: the header `category,total`, then one row per category \
(summed over all months), sorted by category name, with the total written with exactly two \
decimals and no currency sign (for example `groceries,412.05`), and finally a row \
`TOTAL,<sum of all categories>` in the same format."""


def _cents(amount: str) -> int:
    """``"$-3.20"`` or ``"12.5"`` as an integer number of cents."""
    text = amount.strip().replace("$", "")
    negative = text.startswith("-")
    whole, _, frac = text.lstrip("+-").partition(".")
    value = int(whole or "0") * 100 + int((frac + "00")[:2])
    return -value if negative else value


def _money(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"


def _budget_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_months = int_param(params, "months", 3, 1, 12)
    n_categories = int_param(params, "categories", 4, 2, len(_CATEGORIES))
    categories = sorted(rng.sample(_CATEGORIES, n_categories))
    months = [f"2024-{m:02d}" for m in range(1, n_months + 1)]
    totals = dict.fromkeys(categories, 0)
    for mi, month in enumerate(months):
        present = [c for c in categories if mi == 0 or rng.random() < 0.8]
        for cat in present:
            lines = [f"# {cat} expenses for {month}"]
            for _ in range(rng.randint(2, 5)):
                cents = rng.randint(150, 12000)
                if rng.random() < 0.15:
                    cents = -rng.randint(100, 1500)
                    desc = f"Refund: {rng.choice(_PLACES[cat]).lower()}"
                else:
                    desc = rng.choice(_PLACES[cat])
                totals[cat] += cents
                dollar = "$" if rng.random() < 0.4 else ""
                day = rng.randint(1, 28)
                lines.append(f"{month}-{day:02d}; {desc}; {dollar}{_money(cents)}")
            put(workspace, f"Expenses/{month}/{cat}.txt", "\n".join(lines) + "\n")
        put(
            workspace,
            f"Expenses/{month}/notes.txt",
            f"Budget cap this month: {rng.randint(8, 20) * 100}.00\n"
            f"Owe Sam {rng.randint(5, 60)}.50 for the concert tickets.\n",
        )
    put(workspace, "Expenses/README.md", "Monthly expense logs, one file per category.\n")
    return {
        "totals": {c: _money(v) for c, v in totals.items()},
        "grand_total": _money(sum(totals.values())),
    }


def _budget_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    names = ["header", "categories", "category_totals", "grand_total"]
    text, why = read_output(workspace, "budget.csv")
    if text is None:
        return [fail("budget_exists", why), *(fail(n, why) for n in names)]
    rows = parse_csv(text)
    checks = [ok("budget_exists")]
    header = [c.lower() for c in rows[0]] if rows else []
    checks.append(
        ok("header")
        if header == ["category", "total"]
        else fail("header", f"header is {rows[0] if rows else 'missing'}, expected category,total")
    )
    body = [r for r in rows[1:] if r and r[0].upper() != "TOTAL"]
    total_rows = [r for r in rows[1:] if r and r[0].upper() == "TOTAL"]
    expected: dict[str, str] = dict(key["totals"])
    got_names = [r[0] for r in body]
    if got_names == sorted(expected):
        checks.append(ok("categories"))
    else:
        checks.append(
            fail("categories", f"category rows are {got_names}, expected {sorted(expected)}")
        )
    wrong = [
        f"{r[0]}={r[1] if len(r) > 1 else '?'} (expected {expected[r[0]]})"
        for r in body
        if r[0] in expected and (len(r) < 2 or r[1] != expected[r[0]])
    ]
    missing = sorted(set(expected) - set(got_names))
    if wrong or missing:
        detail = "; ".join(wrong[:4]) + (f"; missing {missing}" if missing else "")
        checks.append(fail("category_totals", detail.strip("; ")))
    else:
        checks.append(ok("category_totals"))
    if len(total_rows) != 1 or len(total_rows[0]) < 2:
        checks.append(fail("grand_total", "expected exactly one row TOTAL,<sum>"))
    elif total_rows[0][1] != key["grand_total"]:
        checks.append(
            fail("grand_total", f"TOTAL is {total_rows[0][1]}, expected {key['grand_total']}")
        )
    elif rows[-1] != total_rows[0]:
        checks.append(fail("grand_total", "the TOTAL row is not the last row"))
    else:
        checks.append(ok("grand_total"))
    return checks


def _budget_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    totals: dict[str, int] = {}
    wanted: dict[str, str] = {}  # path -> category
    for rel in tree_files(call, join(root, "Expenses")):
        parts = rel.split("/")
        if len(parts) == 2 and parts[1].endswith(".txt") and parts[1] != "notes.txt":
            wanted[join(root, "Expenses", rel)] = parts[1][: -len(".txt")]
    for path, text in read_many(call, list(wanted)).items():
        cat = wanted[path]
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            totals[cat] = totals.get(cat, 0) + _cents(line.rsplit(";", 1)[1])
    rows = ["category,total", *(f"{c},{_money(totals[c])}" for c in sorted(totals))]
    rows.append(f"TOTAL,{_money(sum(totals.values()))}")
    write_lines(call, join(root, "budget.csv"), rows)


register(
    FsTaskSpec(
        category=CATEGORY,
        name="budget_computation",
        instruction=BUDGET_INSTRUCTION,
        generate=_budget_generate,
        verify=_budget_verify,
        reference=_budget_reference,
        default_params={"months": 3, "categories": 4},
        check_params=range_checker(
            {"months": (1, 12), "categories": (2, len(_CATEGORIES))},
            {"months": 3, "categories": 4},
        ),
    )
)

# =============================================================================================
# desktop_template/contact_information
# =============================================================================================

_FIRST = ["Dana", "Ravi", "Lena", "Tomas", "Amara", "Kenji", "Sofia", "Owen", "Ines", "Malik"]
_LAST = [
    "Reyes",
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Patel",
    "Novak",
    "Haddad",
    "Brennan",
    "Sato",
    "Kowalski",
]
_COMPANIES = [
    ("northwind.example", "Northwind Logistics"),
    ("brightleaf.example", "Brightleaf Studio"),
    ("quarry.example", "Quarry Analytics"),
    ("harbourline.example", "Harbourline Shipping"),
    ("tallpine.example", "Tall Pine Consulting"),
]
_SUBJECTS = [
    "Quarterly numbers",
    "Meeting next week",
    "Draft contract",
    "Invoice question",
    "Site visit",
    "Follow-up",
]

CONTACT_INSTRUCTION = """\
Details about the people I correspond with are scattered over my files. `Inbox/` holds messages \
as text files with `From: <Full Name> <email address>` headers; some senders put their phone \
number in their signature (a line `Phone: ...`). `Notes/call_log.txt` records calls, with the \
number that was dialled. `Notes/domains.txt` says which company each email domain belongs to.

Write `contacts.csv` at the workspace root with the header `name,email,phone,company` and one row \
per person who sent at least one message in `Inbox/`, sorted by name. Take the email address \
from their messages; the phone number from their signature, or, when no signature has one, from \
the call log; and the company from the domain of their email address. Copy every value exactly \
as written in the files."""


def _contact_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_people = int_param(params, "people", 6, 2, 9)
    firsts = rng.sample(_FIRST, n_people + 1)
    lasts = rng.sample(_LAST, n_people + 1)
    phones = [f"+1-555-{n:04d}" for n in rng.sample(range(100, 9999), n_people + 1)]
    people: list[dict[str, Any]] = []
    for i in range(n_people):
        domain, company = rng.choice(_COMPANIES)
        first, last = firsts[i], lasts[i]
        local = f"{first}.{last}".lower() if rng.random() < 0.6 else f"{first[0]}{last}".lower()
        people.append(
            {
                "name": f"{first} {last}",
                "email": f"{local}@{domain}",
                "phone": phones[i],
                "company": company,
                "signed": i % 2 == 0 if i < 2 else rng.random() < 0.5,
            }
        )
    messages: list[tuple[dict[str, Any], int]] = []
    for p in people:
        for k in range(rng.randint(1, 2)):
            messages.append((p, k))
    rng.shuffle(messages)
    for n, (p, k) in enumerate(messages, 1):
        signature = [p["name"].split()[0]]
        if p["signed"] and k == 0:
            signature.append(f"Phone: {p['phone']}")
        body = [
            f"From: {p['name']} <{p['email']}>",
            "To: Alex Kim <alex.kim@home.example>",
            f"Subject: {rng.choice(_SUBJECTS)}",
            "",
            "Hi Alex,",
            "",
            "Just a quick note about what we discussed; more details soon.",
            "",
            "Best,",
            *signature,
        ]
        put(workspace, f"Inbox/msg_{n:02d}.txt", "\n".join(body) + "\n")
    calls = [(p["name"], p["phone"]) for p in people if not p["signed"]]
    calls.append((f"{firsts[-1]} {lasts[-1]} (plumber)", phones[-1]))
    rng.shuffle(calls)
    log = ["# calls made from the home phone"]
    for name, phone in calls:
        log.append(
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} called {name} on {phone}"
        )
    put(workspace, "Notes/call_log.txt", "\n".join(log) + "\n")
    put(
        workspace,
        "Notes/domains.txt",
        "".join(f"{d} -> {c}\n" for d, c in _COMPANIES) + "home.example -> (personal)\n",
    )
    rows = sorted([p["name"], p["email"], p["phone"], p["company"]] for p in people)
    return {"contacts": rows}


def _contact_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    names = ["header", "people", "emails", "phones", "companies"]
    text, why = read_output(workspace, "contacts.csv")
    if text is None:
        return [fail("contacts_exists", why), *(fail(n, why) for n in names)]
    rows = parse_csv(text)
    checks = [ok("contacts_exists")]
    header = [c.lower() for c in rows[0]] if rows else []
    checks.append(
        ok("header")
        if header == ["name", "email", "phone", "company"]
        else fail("header", f"header is {rows[0] if rows else 'missing'}")
    )
    body = rows[1:]
    expected = {r[0]: r for r in key["contacts"]}
    got_names = [r[0] for r in body]
    if got_names == sorted(expected):
        checks.append(ok("people"))
    else:
        missing = sorted(set(expected) - set(got_names))
        extra = sorted(set(got_names) - set(expected))
        checks.append(
            fail(
                "people",
                f"rows are {got_names}; missing {missing}, unexpected {extra}, "
                "or not sorted by name",
            )
        )
    got = {r[0]: r for r in body if r and r[0] in expected}
    for idx, name in [(1, "emails"), (2, "phones"), (3, "companies")]:
        wrong = [
            f"{who}: {row[idx] if len(row) > idx else '(empty)'} (expected {expected[who][idx]})"
            for who, row in sorted(got.items())
            if len(row) <= idx or row[idx] != expected[who][idx]
        ]
        absent = sorted(set(expected) - set(got))
        if wrong:
            checks.append(fail(name, "; ".join(wrong[:4])))
        elif absent:
            checks.append(fail(name, f"no row for {describe(absent, 4)}"))
        else:
            checks.append(ok(name))
    return checks


def _contact_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    people: dict[str, dict[str, str]] = {}
    for is_dir, fname in list_entries(call, join(root, "Inbox")):
        if is_dir:
            continue
        text = read_text(call, join(root, "Inbox", fname))
        m = re.search(r"^From: (.+?) <([^>]+)>", text, re.MULTILINE)
        if not m:
            continue
        person = people.setdefault(m.group(1), {"email": m.group(2)})
        phone = re.search(r"^Phone: (\S+)", text, re.MULTILINE)
        if phone:
            person["phone"] = phone.group(1)
    log = read_text(call, join(root, "Notes", "call_log.txt"))
    for line in log.splitlines():
        m = re.match(r"\S+ called (.+) on (\S+)$", line.strip())
        if m and m.group(1) in people:
            people[m.group(1)].setdefault("phone", m.group(2))
    companies: dict[str, str] = {}
    for line in read_text(call, join(root, "Notes", "domains.txt")).splitlines():
        if "->" in line:
            domain, company = line.split("->", 1)
            companies[domain.strip()] = company.strip()
    rows = ["name,email,phone,company"]
    for name in sorted(people):
        p = people[name]
        company = companies.get(p["email"].rsplit("@", 1)[1], "")
        rows.append(f"{name},{p['email']},{p.get('phone', '')},{company}")
    write_lines(call, join(root, "contacts.csv"), rows)


register(
    FsTaskSpec(
        category=CATEGORY,
        name="contact_information",
        instruction=CONTACT_INSTRUCTION,
        generate=_contact_generate,
        verify=_contact_verify,
        reference=_contact_reference,
        default_params={"people": 6},
        check_params=range_checker({"people": (2, 9)}, {"people": 6}),
    )
)

# =============================================================================================
# desktop_template/file_arrangement
# =============================================================================================

_TYPE_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("images", (".jpg", ".jpeg", ".png", ".gif")),
    ("documents", (".pdf", ".docx", ".txt", ".md")),
    ("spreadsheets", (".csv", ".xlsx")),
    ("archives", (".zip", ".tar.gz", ".7z")),
]
_FINANCE_WORDS = ("invoice", "receipt")
_STEMS = [
    "holiday",
    "scan",
    "report",
    "slides",
    "dataset",
    "backup",
    "photo",
    "minutes",
    "draft",
    "export",
    "letter",
    "summary",
    "setup",
    "manual",
    "poster",
]
_EXTS = [
    ".jpg",
    ".JPG",
    ".png",
    ".gif",
    ".pdf",
    ".docx",
    ".txt",
    ".md",
    ".csv",
    ".xlsx",
    ".zip",
    ".tar.gz",
    ".7z",
    ".exe",
    ".ics",
    ".gz",
]

ARRANGE_INSTRUCTION = """\
Tidy the folder `Downloads/` by moving every file in it into a folder under `Arranged/`, keeping \
file names and contents. Apply the first rule that matches (extensions compare without regard to \
case):
1. the file name contains `invoice` or `receipt` (in any case): `Arranged/finance/`;
2. `.jpg`, `.jpeg`, `.png`, `.gif`: `Arranged/images/`;
3. `.pdf`, `.docx`, `.txt`, `.md`: `Arranged/documents/`;
4. `.csv`, `.xlsx`: `Arranged/spreadsheets/`;
5. `.zip`, `.tar.gz`, `.7z`: `Arranged/archives/`;
6. anything else: `Arranged/other/`.
When you are done `Downloads/` contains no files, and `Arranged/` contains nothing but the \
moved files."""


def arrangement_folder(fname: str) -> str:
    """The ``Arranged/`` subfolder that file name ``fname`` belongs to under the file-arrangement
    rules (first matching rule wins; case-insensitive)."""
    low = fname.lower()
    if any(w in low for w in _FINANCE_WORDS):
        return "finance"
    for folder, exts in _TYPE_RULES:
        if low.endswith(exts):
            return folder
    return "other"


def _arrange_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_files = int_param(params, "files", 20, 4, 60)
    pool = [f"{s}_{n}{e}" for s in _STEMS for n in range(1, 4) for e in _EXTS]
    names: list[str] = []
    for fname in rng.sample(pool, len(pool)):
        # Names stay distinct without regard to case (``a.JPG`` and ``a.jpg`` would collide).
        if all(fname.lower() != n.lower() for n in names):
            names.append(fname)
        if len(names) == n_files - 2:
            break
    names.append(f"{rng.choice(['Invoice', 'invoice'])}_{rng.randint(1000, 9999)}.pdf")
    names.append(f"receipt_{rng.choice(['store', 'taxi', 'hotel'])}.{rng.choice(['png', 'txt'])}")
    placed: dict[str, str] = {}
    sources: list[str] = []
    for fname in sorted(names):
        body = f"contents of {fname}: {rng.randint(10**5, 10**6)}\n"
        put(workspace, f"Downloads/{fname}", body)
        placed[f"Arranged/{arrangement_folder(fname)}/{fname}"] = body
        sources.append(f"Downloads/{fname}")
    return {"placed": placed, "sources": sources}


def _arrange_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    checks = [check_placement(workspace, key["placed"], name="files_arranged")]
    left = sorted(files_under(workspace, "Downloads"))
    checks.append(
        fail("downloads_empty", f"files left in Downloads/: {describe(left)}")
        if left
        else ok("downloads_empty")
    )
    extra = files_under(workspace, "Arranged") - set(key["placed"])
    checks.append(
        fail("no_extra_files", f"unexpected files under Arranged/: {describe(extra)}")
        if extra
        else ok("no_extra_files")
    )
    return checks


def _arrange_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    made: set[str] = set()
    for is_dir, fname in list_entries(call, join(root, "Downloads")):
        if is_dir:
            continue
        folder = arrangement_folder(fname)
        if folder not in made:
            make_dir(call, join(root, "Arranged", folder))
            made.add(folder)
        move(call, join(root, "Downloads", fname), join(root, "Arranged", folder, fname))


register(
    FsTaskSpec(
        category=CATEGORY,
        name="file_arrangement",
        instruction=ARRANGE_INSTRUCTION,
        generate=_arrange_generate,
        verify=_arrange_verify,
        reference=_arrange_reference,
        default_params={"files": 20},
        check_params=range_checker({"files": (4, 60)}, {"files": 20}),
    )
)
