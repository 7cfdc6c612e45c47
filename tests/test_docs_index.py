"""docs/README.md indexes every page under docs/, so a reader (and the README's map) finds each one.

A page is indexed when docs/README.md links to it, or when an index page it links to (a README.md
under docs/, such as the runbooks' table of alerts) does.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def links(page: Path) -> set[Path]:
    out: set[Path] = set()
    for m in LINK.finditer(page.read_text(encoding="utf-8")):
        if not re.match(r"[a-z]+:", m.group(1)):
            out.add((page.parent / m.group(1)).resolve())
    return out


def indexed(docs: Path, index: Path) -> set[Path]:
    """The pages ``index`` links, and those that the README.md pages under ``docs`` it links to link."""
    seen: set[Path] = set()
    todo = [index.resolve()]
    while todo:
        page = todo.pop()
        for target in links(page):
            if target not in seen and target.suffix == ".md" and target.is_file():
                seen.add(target)
                if target.name == "README.md" and target.is_relative_to(docs.resolve()):
                    todo.append(target)
    return seen


def unindexed(docs: Path, index: Path) -> list[str]:
    pages = {p.resolve() for p in docs.rglob("*.md")} - {index.resolve()}
    return sorted(str(p.relative_to(docs.resolve())) for p in pages - indexed(docs, index))


def test_every_page_under_docs_is_in_the_index() -> None:
    assert unindexed(DOCS, DOCS / "README.md") == []


def test_a_page_left_out_is_reported(tmp_path: Path) -> None:
    (tmp_path / "guides").mkdir()
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "guides" / "a.md").write_text("# A\n", encoding="utf-8")
    (tmp_path / "guides" / "b.md").write_text("# B\n", encoding="utf-8")
    (tmp_path / "runbooks" / "README.md").write_text("[X](X.md)\n", encoding="utf-8")
    (tmp_path / "runbooks" / "X.md").write_text("# X\n", encoding="utf-8")
    (tmp_path / "runbooks" / "Y.md").write_text("# Y\n", encoding="utf-8")
    index = tmp_path / "README.md"
    index.write_text("[a](guides/a.md), [runbooks](runbooks/README.md)\n", encoding="utf-8")
    assert unindexed(tmp_path, index) == ["guides/b.md", "runbooks/Y.md"]
