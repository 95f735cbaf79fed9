"""The one way a benchmark writes its figures into a document: the text between a pair of
HTML-comment markers is replaced and everything else is left as a person wrote it, so a
benchmark can be rerun with ``--write`` as often as its figures change."""
from __future__ import annotations

from pathlib import Path


def replace_section(doc: Path, begin: str, end: str, text: str, heading: str = "") -> None:
    """Put ``text`` between the markers ``begin`` and ``end`` of ``doc``. A document without
    the markers (or a missing one) gets them appended at its end, under ``heading`` if one
    is given."""
    content = doc.read_text() if doc.is_file() else ""
    block = f"{begin}\n{text}\n{end}"
    if begin in content and end in content.split(begin, 1)[1]:
        head, rest = content.split(begin, 1)
        doc.write_text(head + block + rest.split(end, 1)[1])
        return
    title = f"{heading}\n\n" if heading else ""
    lead = content.rstrip("\n") + "\n\n" if content.strip() else ""
    doc.write_text(f"{lead}{title}{block}\n")
