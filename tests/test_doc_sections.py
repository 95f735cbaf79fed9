"""benchmarks/doc_sections.py: every benchmark's ``--write`` goes through it, so a rerun must
replace only its own section and keep what people wrote around it byte for byte."""
from __future__ import annotations

import sys

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
