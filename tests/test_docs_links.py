"""The docs a user needs are in the repository: every relative link in README.md, BENCHMARKS.md and
docs/ points at a file inside the repository that exists (an anchor may follow), no page names a
file that is not there (the paper and design notes kept beside the repository), and the paper's
citation page is linked from the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "BENCHMARKS.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto: ...


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)  # code blocks hold no links
    return [t for t in LINK.findall(text) if not EXTERNAL.match(t) and not t.startswith("#")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_stays_in_the_repository_and_exists(page: Path) -> None:
    for target in relative_links(page):
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert path.exists(), f"{page.name} links to a missing file: {target}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_cites_a_file_kept_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for name in ("PAPER.md", "DESIGN.md", "STYLE.md", "../shared"):
        assert name not in text, f"{page.name} names {name}, which is not in the repository"


def test_the_paper_is_cited_and_linked() -> None:
    paper = (ROOT / "docs" / "paper.md").read_text(encoding="utf-8")
    assert "Agentic CPU-GPU Scheduling for Heterogeneous AI Workloads" in paper
    assert "docs/paper.md" in relative_links(ROOT / "README.md")
    assert "paper.md" in relative_links(ROOT / "docs" / "architecture.md")


def test_the_link_check_sees_a_link_that_leaves_the_repository(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("see [DESIGN](../../shared/DESIGN.md) and [web](https://example.org) and [here](#top)\n")
    assert relative_links(page) == ["../../shared/DESIGN.md"]
