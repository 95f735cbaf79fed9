"""benchmarks/doc_sections.py: every benchmark's ``--write`` goes through it, so a rerun must
replace only its own section and keep what people wrote around it byte for byte."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from doc_sections import replace_section  # noqa: E402

BEGIN, END = "<!-- x:begin -->", "<!-- x:end -->"


def test_a_rerun_replaces_only_its_section(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# T\n\nprose\n{BEGIN}\nold\n{END}\nmore prose\n<!-- y:begin -->\nkeep\n")
    replace_section(doc, BEGIN, END, "new\ntable")
    replace_section(doc, BEGIN, END, "newer")
    assert doc.read_text() == (f"# T\n\nprose\n{BEGIN}\nnewer\n{END}\nmore prose\n"
                               "<!-- y:begin -->\nkeep\n")


def test_missing_markers_are_appended_under_the_heading(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# T\n\ntext\n\n\n{END}\n")  # an end marker alone is not a section
    replace_section(doc, BEGIN, END, "figures", "## Section")
    assert doc.read_text() == f"# T\n\ntext\n\n\n{END}\n\n## Section\n\n{BEGIN}\nfigures\n{END}\n"
    fresh = tmp_path / "new.md"
    replace_section(fresh, BEGIN, END, "figures", "# Benchmarks")
    assert fresh.read_text() == f"# Benchmarks\n\n{BEGIN}\nfigures\n{END}\n"


def test_one_marker_twice_delimits_a_section(tmp_path):
    mark = "<!-- link -->"
    doc = tmp_path / "doc.md"
    doc.write_text(f"a\n{mark}\nold\n{mark}\nb\n")
    replace_section(doc, mark, mark, "new")
    assert doc.read_text() == f"a\n{mark}\nnew\n{mark}\nb\n"


DOCS = REPO / "docs"
DECISIONS = DOCS / "decisions"
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def headings(text: str) -> list[str]:
    """The Markdown headings of ``text``, outside fenced code (where ``#`` is a comment)."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line)
    return found


def dated_headings(root: Path) -> list[str]:
    return [f"{doc.relative_to(root)}: {line}" for doc in sorted(root.rglob("*.md"))
            for line in headings(doc.read_text()) if DATE.search(line)]


def record_problems(record: Path, known) -> list[str]:
    """What a decision record lacks: a ``- Command:`` line naming a command in backticks and a
    ``- Commit:`` line; every hash there and in a ``- Scripts removed (held at commit H)``
    line must be one ``known`` accepts."""
    text = record.read_text()
    problems = []
    if not re.search(r"^- Command: `[^`]+`", text, re.M):
        problems.append(f"{record.name}: no '- Command: `...`' line")
    commits = [h for line in re.findall(r"^- Commit: (.*)$", text, re.M)
               for h in COMMIT.findall(line)]
    if not commits:
        problems.append(f"{record.name}: no '- Commit: HASH' line")
    commits += re.findall(r"^- Scripts removed \(held at commit ([0-9a-f]{7,40})\)", text, re.M)
    problems += [f"{record.name}: commit {h} unknown" for h in commits if not known(h)]
    return problems


def git_knows(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0


def test_no_doc_has_a_dated_heading():
    assert dated_headings(DOCS) == []


def test_a_dated_heading_is_found_outside_code_only(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n```\n# 2026-11-28 a comment\n```\n"
                                   "## The rule (since 2026-11-27)\n")
    assert dated_headings(tmp_path) == ["a.md: ## The rule (since 2026-11-27)"]


def test_every_decision_record_names_its_command_and_commit():
    records = sorted(p for p in DECISIONS.glob("*.md") if p.name != "README.md")
    assert records, "docs/decisions/ holds no record"
    in_git = shutil.which("git") is not None and subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--git-dir"], capture_output=True).returncode == 0
    known = git_knows if in_git else (lambda commit: True)
    assert [p for r in records for p in record_problems(r, known)] == []
    index = (DECISIONS / "README.md").read_text()
    assert [r.name for r in records if f"({r.name})" not in index] == []


def test_a_record_without_a_command_or_a_known_commit_fails(tmp_path):
    record = tmp_path / "r.md"
    record.write_text("# R\n\n- Commit: abcdef1\n")
    assert record_problems(record, lambda commit: False) == [
        "r.md: no '- Command: `...`' line", "r.md: commit abcdef1 unknown"]
    record.write_text("# R\n\n- Command: `x`\n- Commit: none\n"
                      "- Scripts removed (held at commit 1234567): `benchmarks/x.py`\n")
    assert record_problems(record, lambda commit: commit != "1234567") == [
        "r.md: no '- Commit: HASH' line", "r.md: commit 1234567 unknown"]
