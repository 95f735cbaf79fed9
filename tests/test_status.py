"""One table of firmware status codes (zocodegen/formats/status.py): its ranges, the C header
rendered from it, the C sources that use it, and the host naming every code."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from zocodegen.errors import UserError
from zocodegen.formats import link as p
from zocodegen.formats import status
from zocodegen.host.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]
C_FOLDERS = ("templates", "targets", "qemu", "tests/data")
#: ZO_IMAGE_OK, ZO_IMAGE_ERR_*, ... of the table's subsystems (board clock results are not
#: statuses: they never leave the board).
PREFIXES = "|".join(sub.ok.removesuffix("OK") for sub in status.SUBSYSTEMS)
STATUS_NAME = re.compile(rf"\b(?:{PREFIXES})(?:ERR_\w+|OK)\b")


def _c_files() -> list[Path]:
    return [f for folder in C_FOLDERS for f in sorted((REPO / folder).rglob("*"))
            if f.suffix in (".c", ".h") or f.name.endswith((".c.j2", ".h.j2"))]


def test_every_subsystem_keeps_to_its_own_range():
    seen: dict[int, str] = {}
    for sub in status.SUBSYSTEMS:
        assert sub.first < 0 and sub.last < sub.first
        for s in sub.codes:
            assert sub.last <= s.code <= sub.first, s
            assert s.code not in seen, f"{s.name} repeats {seen[s.code]}"
            seen[s.code] = s.name
    ranges = sorted((sub.last, sub.first) for sub in status.SUBSYSTEMS)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), "ranges overlap"


def test_the_c_sources_use_the_table_and_define_no_code_of_their_own():
    used, defined = set(), []
    for path in _c_files():
        text = path.read_text()
        used |= set(STATUS_NAME.findall(text))
        defined += [f"{path.relative_to(REPO)}: {m}" for m in
                    re.findall(r"#define\s+(ZO_\w+_ERR_\w+)", text)]
    known = set(status.BY_NAME) | {sub.ok for sub in status.SUBSYSTEMS}
    assert not defined, "status codes defined outside status.py:\n" + "\n".join(defined)
    assert used - known == set(), f"C names without a row: {sorted(used - known)}"
    # every row is used somewhere (a code nothing returns is a stale row)
    assert set(status.BY_NAME) - used == set(), sorted(set(status.BY_NAME) - used)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no host C compiler (cc)")
def test_the_compiled_header_has_the_values_of_the_table(tmp_path):
    """The header of a --data-source sdcard build (every row; its zo_status_names.h names each) and
    of a link build (without the card's and the field run's rows, as before issue 50)."""
    (tmp_path / "zo_status.h").write_text(status.c_header(sdcard=True))
    (tmp_path / "zo_status_names.h").write_text(status.c_names())
    names = [*(sub.ok for sub in status.SUBSYSTEMS), *status.BY_NAME]
    body = "".join(f'    printf("%s %d\\n", "{n}", (int){n});\n'
                   f'    if (strcmp(zo_status_name({n}), {n} ? "{n}" : "ok")) return 1;\n'
                   for n in names)
    (tmp_path / "main.c").write_text('#include <stdio.h>\n#include <string.h>\n'
                                     '#include "zo_status_names.h"\n'
                                     f"int main(void)\n{{\n{body}    return 0;\n}}\n")
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(tmp_path),
                    str(tmp_path / "main.c"), "-o", str(tmp_path / "codes")], check=True)
    printed = subprocess.run([str(tmp_path / "codes")], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    values = dict(line.split() for line in printed if line)
    assert {n: int(v) for n, v in values.items()} == {n: status.code(n) for n in names}
    link = status.c_header()
    assert all((s.name in link) != sub.sdcard for sub in status.SUBSYSTEMS for s in sub.codes)


@pytest.mark.parametrize("code", sorted(status.CODES))
def test_the_host_names_every_code_a_command_can_end_with(code):
    """What `train` says when a command's DONE carries the code: its own meaning and C name
    (a record problem names the record as well)."""
    row = status.CODES[code]
    stub = SimpleNamespace(image_path=Path("data.img"))
    session = SimpleNamespace(run=lambda command: SimpleNamespace(
        done=p.Done(command=b"T", status=code, value=7, cycles=0)))
    with pytest.raises(UserError) as error:
        Trainer._command(stub, session, "training", p.train(3))
    message = str(error.value)
    assert row.name in message
    if code not in (status.code("ZO_IMAGE_ERR_RECORD_CRC"), status.code("ZO_IMAGE_ERR_LABEL")):
        assert row.meaning in message and f"error {code}" in message
    else:
        assert "train record 7 of data.img" in message


def test_an_unknown_code_says_so():
    assert "unknown status -99" in status.describe(-99)
    assert status.describe(0) == "ok"
