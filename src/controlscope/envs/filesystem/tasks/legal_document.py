"""Legal-document tasks: solution tracing, dispute review and individual comments (paper section
4 and appendix B: the "legal documents" category of the MCPMark-style filesystem suite; B.1 names
legal solution tracing, whose agreement-version arguments a patch can get wrong).

Each task has a seeded generator that writes the initial workspace and returns the answer key, a
verifier that returns one check per requirement, and a reference solution that uses only tool
calls. The agreements, reviewers and instructions are our own.
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
    content_lines,
    describe,
    fail,
    files_under,
    int_param,
    join,
    list_entries,
    make_dir,
    ok,
    parse_csv,
    put,
    range_checker,
    read_output,
    read_text,
    workspace_root,
    write_lines,
    write_text,
)

CATEGORY = "legal_document"

_CLAUSES = [
    "Definitions",
    "Scope of Services",
    "Fees",
    "Payment Terms",
    "Confidentiality",
    "Data Protection",
    "Liability",
    "Termination",
    "Notices",
    "Governing Law",
]
_ISSUES = [
    ("late-payment interest is not defined", 4),
    ("the notice period for termination is ambiguous", 8),
    ("no cap on liability for indirect damages", 7),
    ("confidentiality has no end date", 5),
    ("data-breach notification deadline is missing", 6),
    ("service levels are not tied to fees", 3),
    ("the governing law clause names two courts", 10),
    ("the definition of 'Deliverables' is circular", 1),
    ("invoices can be disputed without a deadline", 4),
    ("notices by email are not allowed", 9),
]
"""Issue descriptions with the number of the clause that naturally resolves them."""
_REVIEWERS = [
    "Dana Reyes",
    "Ravi Okafor",
    "Lena Lindqvist",
    "Tomas Moreau",
    "Amara Patel",
    "Kenji Novak",
]
_SENTENCES = [
    "The Parties agree to act in good faith.",
    "This obligation survives the end of the Agreement.",
    "Each Party bears its own costs unless stated otherwise.",
    "Amounts are stated in euros, excluding taxes.",
    "Written consent may not be unreasonably withheld.",
    "The Supplier shall keep accurate records.",
    "Any change requires a signed amendment.",
]


def _clause_body(rng: random.Random) -> str:
    return " ".join(rng.sample(_SENTENCES, 2))


# =============================================================================================
# legal_document/solution_tracing
# =============================================================================================

TRACE_INSTRUCTION = """\
The folder `Agreements/` holds successive versions of a service agreement, \
`agreement_v1.md`, `agreement_v2.md`, and so on, and the list of open issues `issues.md` (lines \
`- ISS-NN: <description>`). Each agreement version starts with a change log. An entry \
`Resolves ISS-NN by revising clause K (<title>)` means that version resolved the issue in clause \
K; an entry `Reopens ISS-NN ...` means the issue became unresolved again. Apply the change logs \
in increasing version number; ignore everything under `Agreements/drafts/`.

Write `Agreements/resolution_trace.csv` with the header `issue,version,clause` and one row per \
issue of `issues.md`, sorted by issue id. For an issue that is resolved after the last version, \
give the version of its latest resolution (for example `v3`) and the clause number (for example \
`7`); for an issue that is unresolved (never resolved, or reopened after its latest resolution), \
write `open` and leave the clause empty (for example `ISS-04,open,`)."""


def _reopen(issue: str) -> str:
    return f"Reopens {issue}: the counterparty rejected the wording"


def _title_clause(entry: str) -> str:
    """Fill the ``(@)`` placeholder of a change-log entry with the revised clause's title."""
    m = re.search(r"clause (\d+) \(@\)", entry)
    return entry.replace("(@)", f"({_CLAUSES[int(m.group(1)) - 1]})") if m else entry


def _trace_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_issues = int_param(params, "issues", 6, 2, len(_ISSUES))
    n_versions = int_param(params, "versions", 4, 3, 12)
    ids = [f"ISS-{i:02d}" for i in range(1, n_issues + 1)]
    issues = rng.sample(_ISSUES, n_issues)
    clause_count = len(_CLAUSES)
    log: dict[int, list[str]] = {v: [] for v in range(2, n_versions + 1)}
    status: dict[str, list[str]] = {}
    kinds = ["resolved", "open", "reopened", "re-resolved"]
    for i, (iss, (_, home)) in enumerate(zip(ids, issues, strict=True)):
        kind = kinds[i] if i < len(kinds) else rng.choice([*kinds, "resolved"])
        if kind == "re-resolved" and n_versions < 4:
            kind = "resolved"
        state = ["open", ""]
        if kind == "resolved":
            v, c = rng.randint(2, n_versions), home
            log[v].append(f"Resolves {iss} by revising clause {c} (@)")
            state = [f"v{v}", str(c)]
        elif kind == "reopened":
            v = rng.randint(2, n_versions - 1)
            log[v].append(f"Resolves {iss} by revising clause {home} (@)")
            log[rng.randint(v + 1, n_versions)].append(_reopen(iss))
        elif kind == "re-resolved":
            v = rng.randint(2, n_versions - 2)
            log[v].append(f"Resolves {iss} by revising clause {home} (@)")
            v2 = rng.randint(v + 1, n_versions - 1)
            log[v2].append(_reopen(iss))
            v3, c3 = rng.randint(v2 + 1, n_versions), rng.choice([home, 1, 2])
            log[v3].append(f"Resolves {iss} by revising clause {c3} (@)")
            state = [f"v{v3}", str(c3)]
        status[iss] = state
    put(
        workspace,
        "Agreements/issues.md",
        "# Open issues raised at signing\n\n"
        + "".join(f"- {iss}: {t}\n" for iss, (t, _) in zip(ids, issues, strict=True)),
    )
    for v in range(1, n_versions + 1):
        entries = log.get(v, [])
        entries = [_title_clause(e) for e in entries]
        if v > 1 and rng.random() < 0.6:
            entries.insert(rng.randint(0, len(entries)), "Editorial fixes in clause 1")
        lines = [f"# Service Agreement, version {v}", "", "## Change log", ""]
        lines += [f"- {e}." for e in entries] if entries else ["- Initial version."]
        lines.append("")
        for c in range(1, clause_count + 1):
            lines += [f"## Clause {c}: {_CLAUSES[c - 1]}", "", _clause_body(rng), ""]
        put(workspace, f"Agreements/agreement_v{v}.md", "\n".join(lines))
    open_ids = [iss for iss in ids if status[iss][0] == "open"] or ids[:1]
    draft_issue = rng.choice(open_ids)
    put(
        workspace,
        f"Agreements/drafts/agreement_v{n_versions + 1}_draft.md",
        f"# Service Agreement, draft of version {n_versions + 1}\n\n## Change log\n\n"
        f"- Resolves {draft_issue} by revising clause 2 (Scope of Services).\n",
    )
    return {"trace": [[iss, *status[iss]] for iss in ids]}


def _trace_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    names = ["header", "issues", "resolved_issues", "open_issues"]
    text, why = read_output(workspace, "Agreements/resolution_trace.csv")
    if text is None:
        return [fail("trace_exists", why), *(fail(n, why) for n in names)]
    rows = parse_csv(text)
    checks = [ok("trace_exists")]
    header = [c.lower() for c in rows[0]] if rows else []
    checks.append(
        ok("header")
        if header == ["issue", "version", "clause"]
        else fail("header", f"header is {rows[0] if rows else 'missing'}")
    )
    body = rows[1:]
    expected = {r[0]: r for r in key["trace"]}
    got_ids = [r[0] for r in body]
    checks.append(
        ok("issues")
        if got_ids == sorted(expected)
        else fail("issues", f"issue rows are {got_ids}, expected {sorted(expected)}")
    )
    got = {r[0]: ([*r, "", ""])[:3] for r in body if r}
    for name, want_open in [("resolved_issues", False), ("open_issues", True)]:
        wrong = []
        for iss, exp in sorted(expected.items()):
            if (exp[1] == "open") != want_open:
                continue
            row = got.get(iss)
            if row is None:
                wrong.append(f"{iss}: no row")
            elif [row[1].lower(), row[2]] != [exp[1], exp[2]]:
                wrong.append(f"{iss}: {row[1]},{row[2]} (expected {exp[1]},{exp[2]})")
        checks.append(fail(name, "; ".join(wrong[:4])) if wrong else ok(name))
    return checks


def _trace_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    issues = re.findall(
        r"^- (ISS-\d+):", read_text(call, join(root, "Agreements", "issues.md")), re.MULTILINE
    )
    versions = sorted(
        int(m.group(1))
        for is_dir, name in list_entries(call, join(root, "Agreements"))
        if not is_dir and (m := re.fullmatch(r"agreement_v(\d+)\.md", name))
    )
    state = {iss: ("open", "") for iss in issues}
    for v in versions:
        text = read_text(call, join(root, "Agreements", f"agreement_v{v}.md"))
        for line in text.splitlines():
            m = re.match(r"- Resolves (ISS-\d+) by revising clause (\d+)", line)
            if m:
                state[m.group(1)] = (f"v{v}", m.group(2))
            m = re.match(r"- Reopens (ISS-\d+)", line)
            if m:
                state[m.group(1)] = ("open", "")
    rows = ["issue,version,clause", *(f"{i},{state[i][0]},{state[i][1]}" for i in sorted(issues))]
    write_lines(call, join(root, "Agreements", "resolution_trace.csv"), rows)


register(
    FsTaskSpec(
        category=CATEGORY,
        name="solution_tracing",
        instruction=TRACE_INSTRUCTION,
        generate=_trace_generate,
        verify=_trace_verify,
        reference=_trace_reference,
        default_params={"issues": 6, "versions": 4},
        check_params=range_checker(
            {"issues": (2, len(_ISSUES)), "versions": (3, 12)}, {"issues": 6, "versions": 4}
        ),
    )
)

# =============================================================================================
# legal_document/dispute_review
# =============================================================================================

_SUB_TITLES = [
    "Scope",
    "Exceptions",
    "Timing",
    "Amounts",
    "Procedure",
    "Records",
    "Audit",
    "Remedies",
]

DISPUTE_INSTRUCTION = """\
`Contract/master_agreement.md` is a draft contract whose sub-clauses are headed \
`### <number> <title>` (for example `### 3.2 Amounts`). Each file in `Review/` holds one \
reviewer's remarks: the first line is `# Review by <Full Name>`, then lines \
`[<clause number>] <remark>`. A remark starting with `DISPUTED` disputes the clause; a later \
remark of the same reviewer on the same clause starting with `WITHDRAWN` cancels that dispute. \
Other remarks (`Agreed.`, `Comment: ...`) are not disputes.

Write `Review/dispute_summary.csv` with the header `clause,title,disputes,reviewers` and one row \
per clause that has at least one standing dispute: the clause number, its title from the \
contract, the number of reviewers who dispute it, and their full names sorted alphabetically \
and joined with `; `. Sort the rows by number of disputes (most first), then by clause number \
in numeric order (3.2 comes before 3.10)."""

_DISPUTE_REASONS = [
    "this wording shifts risk to us.",
    "the deadline is unrealistic for our team.",
    "we never agreed to this amount.",
    "this conflicts with our insurance policy.",
    "the term is far longer than market practice.",
]
_REVIEW_COMMENTS = [
    "please add an example.",
    "a cross-reference would help here.",
    "fine, but check the numbering.",
    "the disputed part is elsewhere, not here.",
]


def _clause_key(number: str) -> tuple[int, ...]:
    return tuple(int(p) for p in number.split("."))


def _dispute_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_reviewers = int_param(params, "reviewers", 4, 2, len(_REVIEWERS))
    n_sections = int_param(params, "sections", 4, 2, 6)
    reviewers = sorted(rng.sample(_REVIEWERS, n_reviewers))
    titles: dict[str, str] = {}
    lines = ["# Master Services Agreement (draft)", ""]
    for s in range(1, n_sections + 1):
        lines += [f"## {s}. {_CLAUSES[s - 1]}", ""]
        subs = rng.randint(2, 4) if s != 2 else 11
        for k, title in enumerate(rng.sample(_SUB_TITLES * 2, subs), 1):
            titles[f"{s}.{k}"] = title
            lines += [f"### {s}.{k} {title}", "", _clause_body(rng), ""]
    put(workspace, "Contract/master_agreement.md", "\n".join(lines))
    clauses = sorted(titles, key=_clause_key)
    standing: dict[str, list[str]] = {}
    for who in reviewers:
        remarks: list[str] = []
        picked = rng.sample(clauses, min(len(clauses), rng.randint(4, 7)))
        if who == reviewers[0]:
            picked = list(dict.fromkeys(["2.10", "2.2", *picked]))
        for c in picked:
            roll = rng.random()
            if c in ("2.10", "2.2") or roll < 0.45:
                remarks.append(f"[{c}] DISPUTED: {rng.choice(_DISPUTE_REASONS)}")
                if roll < 0.12 and c not in ("2.10", "2.2"):
                    remarks.append(f"[{c}] WITHDRAWN: settled in the call on Monday.")
                else:
                    standing.setdefault(c, []).append(who)
            elif roll < 0.7:
                remarks.append(f"[{c}] Agreed.")
            else:
                remarks.append(f"[{c}] Comment: {rng.choice(_REVIEW_COMMENTS)}")
        # Withdrawals come after the dispute they cancel; keep other remarks shuffled.
        disputes = [r for r in remarks if "DISPUTED" in r]
        rest = [r for r in remarks if "DISPUTED" not in r and "WITHDRAWN" not in r]
        withdrawals = [r for r in remarks if "WITHDRAWN" in r]
        rng.shuffle(rest)
        body = disputes + rest
        rng.shuffle(body)
        body += withdrawals
        slug = who.lower().replace(" ", "_")
        put(
            workspace,
            f"Review/{slug}.md",
            f"# Review by {who}\n\n" + "\n".join(body) + "\n",
        )
    rows = [
        [c, titles[c], str(len(w)), "; ".join(sorted(w))]
        for c, w in sorted(standing.items(), key=lambda kv: (-len(kv[1]), _clause_key(kv[0])))
    ]
    return {"summary": rows}


def _dispute_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    names = ["header", "disputed_clauses", "titles", "counts", "reviewers", "order"]
    text, why = read_output(workspace, "Review/dispute_summary.csv")
    if text is None:
        return [fail("summary_exists", why), *(fail(n, why) for n in names)]
    rows = parse_csv(text)
    checks = [ok("summary_exists")]
    header = [c.lower() for c in rows[0]] if rows else []
    checks.append(
        ok("header")
        if header == ["clause", "title", "disputes", "reviewers"]
        else fail("header", f"header is {rows[0] if rows else 'missing'}")
    )
    body = [([*r, "", "", ""])[:4] for r in rows[1:]]
    expected = {r[0]: r for r in key["summary"]}
    got_clauses = [r[0] for r in body]
    missing = sorted(set(expected) - set(got_clauses), key=_safe_key)
    extra = sorted(set(got_clauses) - set(expected), key=_safe_key)
    checks.append(
        fail("disputed_clauses", f"missing {missing}, unexpected {extra}")
        if missing or extra or len(got_clauses) != len(set(got_clauses))
        else ok("disputed_clauses")
    )
    got = {r[0]: r for r in body if r[0] in expected}
    for idx, name in [(1, "titles"), (2, "counts"), (3, "reviewers")]:
        wrong = []
        for c, row in sorted(got.items(), key=lambda kv: _safe_key(kv[0])):
            value = row[idx]
            if idx == 3:
                value = "; ".join(p.strip() for p in value.split(";"))
            if value != expected[c][idx]:
                wrong.append(f"{c}: {row[idx]!r} (expected {expected[c][idx]!r})")
        checks.append(fail(name, "; ".join(wrong[:4])) if wrong else ok(name))
    want_order = [r[0] for r in key["summary"]]
    checks.append(
        ok("order")
        if got_clauses == want_order
        else fail("order", f"rows are in order {got_clauses}, expected {want_order}")
    )
    return checks


def _safe_key(number: str) -> tuple[int, ...]:
    try:
        return _clause_key(number)
    except ValueError:
        return (10**9,)


def _dispute_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    contract = read_text(call, join(root, "Contract", "master_agreement.md"))
    titles = dict(re.findall(r"^### (\d+(?:\.\d+)*) (.+)$", contract, re.MULTILINE))
    standing: dict[str, set[str]] = {}
    for is_dir, fname in list_entries(call, join(root, "Review")):
        if is_dir or not fname.endswith(".md"):
            continue
        text = read_text(call, join(root, "Review", fname))
        who_m = re.search(r"^# Review by (.+)$", text, re.MULTILINE)
        if not who_m:
            continue
        who = who_m.group(1).strip()
        for c, remark in re.findall(r"^\[([\d.]+)\] (.*)$", text, re.MULTILINE):
            if remark.startswith("DISPUTED"):
                standing.setdefault(c, set()).add(who)
            elif remark.startswith("WITHDRAWN"):
                standing.get(c, set()).discard(who)
    rows = ["clause,title,disputes,reviewers"]
    ordered = sorted(
        ((c, w) for c, w in standing.items() if w),
        key=lambda kv: (-len(kv[1]), _clause_key(kv[0])),
    )
    for c, w in ordered:
        rows.append(f"{c},{titles[c]},{len(w)},{'; '.join(sorted(w))}")
    write_lines(call, join(root, "Review", "dispute_summary.csv"), rows)


register(
    FsTaskSpec(
        category=CATEGORY,
        name="dispute_review",
        instruction=DISPUTE_INSTRUCTION,
        generate=_dispute_generate,
        verify=_dispute_verify,
        reference=_dispute_reference,
        default_params={"reviewers": 4, "sections": 4},
        check_params=range_checker(
            {"reviewers": (2, len(_REVIEWERS)), "sections": (2, 6)},
            {"reviewers": 4, "sections": 4},
        ),
    )
)

# =============================================================================================
# legal_document/individual_comments
# =============================================================================================

_DOCS = ["lease_agreement.md", "nda.md", "supply_contract.md", "employment_terms.md"]
_REMARKS = [
    "Please define this term before it is used.",
    "The deadline here conflicts with section 2.",
    "Can we shorten this paragraph?",
    "This should mention the annual review.",
    "Check the amount against the price list.",
    "The counterparty will not accept this.",
    "Add a reference to the data annex.",
    "Is thirty days realistic?",
    "Suggest moving this to the appendix.",
    "Wording is fine now, thanks.",
    "Spell out who pays for shipping.",
    "We need legal sign-off on this part.",
]

COMMENTS_INSTRUCTION = """\
The drafts in `Drafts/` (the `.md` files directly in that folder; ignore `Drafts/archive/`) are \
divided into sections headed `## <number>. <title>`. Reviewers left inline comments as lines \
`> [<Full Name>]: <comment>`; a comment written `> [<Full Name>] (resolved): <comment>` is \
resolved and must be skipped.

Collect every unresolved comment into one file per reviewer: `Comments/<first>_<last>.txt`, the \
reviewer's name in lower case with the space replaced by `_` (for example \
`Comments/dana_reyes.txt`). Each line of a reviewer's file is \
`<draft file name> | <section number> | <comment>` (for example `nda.md | 3 | Is thirty days \
realistic?`), ordered by draft file name and then by position in the draft. Create files only \
for reviewers who have at least one unresolved comment, and nothing else in `Comments/`."""


def _comments_generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    n_docs = int_param(params, "drafts", 3, 1, len(_DOCS))
    n_reviewers = int_param(params, "reviewers", 4, 2, len(_REVIEWERS))
    docs = sorted(rng.sample(_DOCS, n_docs))
    reviewers = rng.sample(_REVIEWERS, n_reviewers)
    silent = reviewers[-1]  # only resolved comments: must get no file
    expected: dict[str, list[str]] = {}
    first_doc = True
    for doc in docs:
        lines = [f"# {doc[:-3].replace('_', ' ').title()} (draft)", ""]
        for s in range(1, rng.randint(3, 5) + 1):
            lines += [f"## {s}. {rng.choice(_CLAUSES)}", "", _clause_body(rng)]
            commenters = rng.sample(reviewers, rng.randint(0, 2))
            if first_doc and s == 1:
                commenters = [*reviewers[:-1], silent]
            for who in commenters:
                remark = rng.choice(_REMARKS)
                # Everyone but ``silent`` has an unresolved comment in the first section.
                if who == silent or (not (first_doc and s == 1) and rng.random() < 0.2):
                    lines.append(f"> [{who}] (resolved): {remark}")
                else:
                    lines.append(f"> [{who}]: {remark}")
                    expected.setdefault(who, []).append(f"{doc} | {s} | {remark}")
            lines.append("")
        first_doc = False
        put(workspace, f"Drafts/{doc}", "\n".join(lines))
    put(
        workspace,
        "Drafts/archive/old_nda.md",
        f"# Old NDA\n\n## 1. Definitions\n\n> [{reviewers[0]}]: Superseded remark.\n",
    )
    return {
        "files": {
            f"Comments/{who.lower().replace(' ', '_')}.txt": lines
            for who, lines in sorted(expected.items())
        }
    }


def _comments_verify(workspace: Path, key: AnswerKey) -> list[Check]:
    expected: dict[str, list[str]] = key["files"]
    checks: list[Check] = []
    if not (workspace / "Comments").is_dir():
        checks.append(fail("comments_folder", "Comments/ does not exist"))
    else:
        checks.append(ok("comments_folder"))
    for rel, want in sorted(expected.items()):
        name = f"comments:{rel.rsplit('/', 1)[1][:-4]}"
        text, why = read_output(workspace, rel)
        if text is None:
            checks.append(fail(name, why))
            continue
        got = [" | ".join(p.strip() for p in ln.split("|")) for ln in content_lines(text)]
        if got == want:
            checks.append(ok(name, f"{len(want)} comment(s)"))
        elif sorted(got) == sorted(want):
            checks.append(fail(name, f"{rel} has the right comments in the wrong order"))
        else:
            missing = [w for w in want if w not in got]
            extra = [g for g in got if g not in want]
            checks.append(
                fail(
                    name,
                    f"{rel}: {len(missing)} missing (e.g. {missing[:1]}), "
                    f"{len(extra)} unexpected (e.g. {extra[:1]})",
                )
            )
    extra_files = files_under(workspace, "Comments") - set(expected)
    if not (workspace / "Comments").is_dir():
        checks.append(fail("no_extra_files", "Comments/ does not exist"))
    elif extra_files:
        checks.append(
            fail("no_extra_files", f"unexpected files in Comments/: {describe(extra_files)}")
        )
    else:
        checks.append(ok("no_extra_files"))
    return checks


def _comments_reference(call: ToolCaller) -> None:
    root = workspace_root(call)
    collected: dict[str, list[str]] = {}
    for is_dir, fname in list_entries(call, join(root, "Drafts")):
        if is_dir or not fname.endswith(".md"):
            continue
        section = ""
        for line in read_text(call, join(root, "Drafts", fname)).splitlines():
            head = re.match(r"## (\d+)\. ", line)
            if head:
                section = head.group(1)
                continue
            m = re.match(r"> \[([^\]]+)\]: (.*)$", line)
            if m:
                collected.setdefault(m.group(1), []).append(f"{fname} | {section} | {m.group(2)}")
    make_dir(call, join(root, "Comments"))
    for who, lines in sorted(collected.items()):
        slug = who.lower().replace(" ", "_")
        write_text(call, join(root, "Comments", f"{slug}.txt"), "\n".join(lines) + "\n")


register(
    FsTaskSpec(
        category=CATEGORY,
        name="individual_comments",
        instruction=COMMENTS_INSTRUCTION,
        generate=_comments_generate,
        verify=_comments_verify,
        reference=_comments_reference,
        default_params={"drafts": 3, "reviewers": 4},
        check_params=range_checker(
            {"drafts": (1, len(_DOCS)), "reviewers": (2, len(_REVIEWERS))},
            {"drafts": 3, "reviewers": 4},
        ),
    )
)
