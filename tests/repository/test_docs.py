"""The documentation holds together: relative links resolve, the README stays a front page, and the
code cites the contract in the repository (docs/contract.md), not an outside document.
Text only: no MindSpore import, so it runs in a second."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from _paths import ROOT

DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# The contract used to live outside the repository and was cited by a four-letter name (alone, with a
# section number, or as that name + ".md"); the pattern is assembled so this file does not match itself.
OLD_CITATION = re.compile(r"\b" + "SP" + r"EC(\.md|\b(?!S))")
SCANNED = ("ms_grad_ops", "cpu", "infer_shape", "ascendc", "tests", "scripts", "examples", "docs", "benchmarks")
SUFFIXES = {".py", ".h", ".cc", ".cpp", ".md", ".sh", ".txt", ".toml"}


def _relative_links(doc: Path) -> list[str]:
    links = [m.group(1) for m in LINK.finditer(doc.read_text(encoding="utf-8"))]
    return [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]


def test_docs_exist() -> None:
    assert (ROOT / "docs" / "contract.md").is_file()
    assert len(DOCS) > 10, DOCS


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    missing = [link for link in _relative_links(doc) if not (doc.parent / link.split("#")[0]).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


def test_contract_anchors_exist() -> None:
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")))
    broken = [f"{doc.relative_to(ROOT)}: {link}" for doc in DOCS for link in _relative_links(doc)
              if link.split("#")[0].endswith("contract.md") and "#" in link and link.split("#")[1] not in anchors]
    assert not broken, broken


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 160, f"README.md has {lines} lines; move detail into docs/"


def test_no_citation_of_the_outside_contract() -> None:
    files = [ROOT / "README.md"] + [p for d in SCANNED for p in (ROOT / d).rglob("*")
                                    if p.suffix in SUFFIXES and ".venv" not in p.parts and p.is_file()]
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in files if p != ROOT / "docs" / "contract.md"
            for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if OLD_CITATION.search(line)]
    assert not hits, f"cite docs/contract.md sections instead: {hits}"
