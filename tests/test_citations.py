"""Every citation in the repository points at a document in the repository, and at a section it has.

Code, tests, docs, alert text, runbooks and CLI output cite the design docs and guides by path and
section (``docs/design/scheduler.md §4.5``); a file that names a document may then cite its sections
as bare ``§4.5``. A bare section resolves to the document named last before it, or to the file's
home document: the one a "Section signs (§) refer to <doc>." sentence names, else the first one it
names, or for a page under ``docs/`` the page itself. Sources that are
not in the repository (HAMi's own notes, the upstream guides they were written from) must not be
cited at all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("src", "tests", "docs", "alerts", "dashboards", "deploy", "scripts", "bench", "README.md")
SUFFIXES = {".py", ".pyi", ".proto", ".md", ".yaml", ".yml", ".json", ".txt", ".toml", ".sh", ".cfg"}
SELF = Path(__file__).resolve()

# Citations of material that is not in the repository.
FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an upstream guide by number", re.compile(r"\b[Ss]eeds?[ _]00[0-3]\b")),
    ("an upstream guide by file name", re.compile(r"\b00[0-3]_[0-9a-f]{16}\.txt\b")),
    # "seed" as a word about a guide ("the seed's table"); seed(...), seed=..., ``seed`` and a
    # random seed's flag ("--seed") are code.
    ("an upstream guide ('seed')", re.compile(r"(?<!--)\b[Ss]eeds?\b(?!\s*[(),:=\[\]{}`\"])")),
    ("a spec without a path", re.compile(r"\bspec\s*§")),
    ("a spec file", re.compile(r"(?<![\w/.-])spec/[\w.-]+\.md|deviceplugin-monitor\.md")),
    ("the shared sources", re.compile(r"\bshared/(?:spec|seeds|metrics-contract)")),
    ("HAMi's protocol notes by file name", re.compile(r"\bprotocol\.md\b")),
    ("a guide without a path", re.compile(r"\bguide\s+§")),
)
# Outside docs/, design docs are named by their repository path.
BARE_DOC = re.compile(r"(?<![\w/.-])(?:scheduler|node-agent|metrics-contract|differences)\.md\b")
DOC_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*[\w-]")
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
SECTION = re.compile(r"§\s?([A-Z]|\d+)((?:\.\d+)*)")
HOME_NOTE = re.compile(r"Section signs \(§\) refer to (docs/[\w./-]+\.md)")
HEADING = re.compile(r"^#{1,6}\s+(?:§\s?)?([A-Z]|\d+)((?:\.\d+)*)\.?(?=\s)")


@dataclass(frozen=True)
class Problem:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def scanned_files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        base = ROOT / name
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        out.extend(
            p
            for p in paths
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts and p.resolve() != SELF
        )
    return out


def sections(doc: Path) -> set[str]:
    """Section ids of a Markdown page from its headings (``## §4 …``, ``### 4.1 …``, ``## A. …``)."""
    ids: set[str] = set()
    if not doc.is_file():
        return ids
    fenced = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            ids.add(m.group(1) + m.group(2))
    return ids


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def check_text(path: Path, text: str, section_cache: dict[Path, set[str]]) -> list[Problem]:
    """Problems of one file's text (``path`` locates it: relative links, its home document)."""
    problems: list[Problem] = []
    in_docs = path.is_relative_to(ROOT / "docs")

    def where(pos: int) -> str:
        return f"{_rel(path)}:{_line(text, pos)}"

    for what, pattern in FORBIDDEN:
        for m in pattern.finditer(text):
            problems.append(Problem(where(m.start()), f"cites {what}: {m.group(0)!r}"))
    if not in_docs:
        for m in BARE_DOC.finditer(text):
            problems.append(Problem(where(m.start()), f"names {m.group(0)} without its docs/ path"))

    # Document mentions, in order: repository paths, and relative Markdown links in Markdown files.
    mentions: list[tuple[int, Path]] = []
    for m in DOC_PATH.finditer(text):
        target = ROOT / m.group(0).rstrip(".")
        if not target.exists():
            problems.append(Problem(where(m.start()), f"{m.group(0)} does not exist"))
        elif target.suffix == ".md":
            mentions.append((m.end(), target))
    if path.suffix == ".md":
        for m in MD_LINK.finditer(text):
            link = m.group(1)
            if re.match(r"[a-z]+:", link) or link.startswith("/"):
                continue
            target = (path.parent / link).resolve()
            if not target.exists():
                problems.append(Problem(where(m.start()), f"link {link} does not exist"))
            elif target.suffix == ".md":
                mentions.append((m.end(), target))
    mentions.sort(key=lambda x: x[0])

    declared = HOME_NOTE.search(text)
    if in_docs and path.suffix == ".md":
        home: Path | None = path
    elif declared:
        home = ROOT / declared.group(1)
    else:
        home = mentions[0][1] if mentions else None
    for m in SECTION.finditer(text):
        sid = m.group(1) + m.group(2)
        before = [doc for end, doc in mentions if end <= m.start()]
        candidates = [d for d in (before[-1] if before else None, home) if d is not None]
        if not candidates:
            problems.append(Problem(where(m.start()), f"§{sid} but the file names no document"))
            continue
        for doc in candidates:
            if doc not in section_cache:
                section_cache[doc] = sections(doc)
        if not any(sid in section_cache[d] for d in candidates):
            names = " or ".join(_rel(d) for d in dict.fromkeys(candidates))
            problems.append(Problem(where(m.start()), f"§{sid} is not a section of {names}"))
    return problems


def check_repository() -> list[Problem]:
    cache: dict[Path, set[str]] = {}
    problems: list[Problem] = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if path.suffix == ".json":
            # Generated dashboards: check the text a user reads, with escapes undone.
            text = json.dumps(json.loads(text), ensure_ascii=False)
        problems.extend(check_text(path, text, cache))
    return problems


def test_every_citation_resolves() -> None:
    problems = check_repository()
    assert not problems, "\n".join(map(str, problems))


def test_the_design_docs_and_guides_exist_with_their_sections() -> None:
    design, guides = ROOT / "docs" / "design", ROOT / "docs" / "guides"
    assert {"1.5", "2.2"} <= sections(design / "scheduler-annotations.md")
    assert {"3.2", "4.1", "4.9"} <= sections(design / "scheduler-filter.md")
    assert {"5.3", "6.5", "7.1", "8"} <= sections(design / "scheduler-extender.md")
    assert {"9.3", "10", "11"} <= sections(design / "scheduler.md")
    assert {"A.3", "A.9"} <= sections(design / "node-agent-region.md")
    assert {"B.2", "D.1"} <= sections(design / "node-agent-monitor.md")
    assert {"C.4", "C.7", "E"} <= sections(design / "node-agent-device-plugin.md")
    assert {"F"} <= sections(design / "node-agent.md")
    assert {"4.4", "5.4", "7"} <= sections(guides / "device-plugin-debugging.md")
    assert {"2.1", "3.3", "4.5", "6.1"} <= sections(guides / "tuning.md")
    assert {"3.2", "5", "7"} <= sections(guides / "scheduler-debugging.md")
    assert (guides / "profiling.md").exists() and (design / "differences.md").exists()


CASES = {
    "upstream guide": ("x.py", '"""Fix it (seed 001 §4.4)."""', "upstream guide by number"),
    "guide word": ("x.py", "# the seed's table", "upstream guide ('seed')"),
    "spec": ("x.py", '"""As spec §4.1 says."""', "a spec without a path"),
    "spec path": ("x.py", "# spec/scheduler.md", "a spec file"),
    "shared contract": ("x.py", 'P = "../shared/metrics-contract.md"', "the shared sources"),
    "bare doc": ("x.py", "# see metrics-contract.md", "without its docs/ path"),
    "missing doc": ("x.py", "# docs/design/nothing.md §1", "does not exist"),
    "missing section": ("x.py", "# docs/design/scheduler.md §4.99", "§4.99 is not a section"),
    "bare section, no doc": ("x.py", "# see §4.1", "names no document"),
    "bare section, wrong doc": ("x.py", "# docs/guides/tuning.md §2.1, then §C.7", "§C.7 is not a section"),
    "bad link": ("docs/x.md", "see [it](nothing.md)", "link nothing.md does not exist"),
    "guide without a path": ("docs/x.md", "(tuning guide §6.1)", "guide without a path"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_broken_citation_is_reported(case: str) -> None:
    name, text, expected = CASES[case]
    problems = check_text(ROOT / name, text, {})
    assert any(expected in str(p) for p in problems), problems


@pytest.mark.parametrize(
    "text",
    [
        '"""Docs: docs/design/scheduler-filter.md §4.1 and §4.5; docs/guides/tuning.md §2.1-§2.2."""',
        "rng = random.Random(seed)  # def seed(api), ``seed`` writes, tuple[Seed, int]",
        '"""Bind (§5.3), docs/guides/tuning.md §2.1.\n\n'
        'Section signs (§) refer to docs/design/scheduler-extender.md."""',
    ],
)
def test_a_sound_citation_passes(text: str) -> None:
    assert check_text(ROOT / "x.py", text, {}) == []
