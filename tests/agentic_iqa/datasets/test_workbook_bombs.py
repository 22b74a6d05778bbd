"""A spreadsheet under 10 MB is read within 500 MB, whatever it holds.

Each hostile workbook is SPAQ's spreadsheet rewritten: millions of shared strings in a part
whose name is not ``sharedStrings.xml`` (found by its content type, as openpyxl finds it), or
within the bytes a shared-strings part may take, a stylesheet of millions of formats, a row of
millions of cells, millions of rows.  Each is read by a fresh process, whose own peak RSS
(VmHWM) is the figure."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from openpyxl import Workbook

from tests.conftest import REPO

SPAQ_FILE = "Annotations/MOS and Image attribute scores.xlsx"
SHARED_STRINGS = "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
MAIN = b'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
#: SPAQ's header row, so that a reader goes on to the rows below it.
HEADER = (
    b'<row><c t="inlineStr"><is><t>Image name</t></is></c>'
    b'<c t="inlineStr"><is><t>MOS</t></is></c></row>'
)


def _repeated(head: bytes, item: bytes, count: int, tail: bytes) -> Callable[[], bytes]:
    return lambda: head + item * count + tail


def _workbook(
    path: Path, replace: dict[str, Callable[[], bytes]], overrides: dict[str, str] | None = None
) -> None:
    """A valid SPAQ sheet, its entries ``replace``d (added when new), and content-type
    overrides added for ``overrides`` (part name: content type)."""
    buffer = io.BytesIO()
    workbook = Workbook()
    workbook.active.append(["Image name", "MOS"])
    workbook.active.append(["a.png", 50.0])
    workbook.save(buffer)
    path.parent.mkdir(parents=True)
    with (
        zipfile.ZipFile(buffer) as source,
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "[Content_Types].xml":
                for part, kind in (overrides or {}).items():
                    data = data.replace(
                        b"</Types>",
                        f'<Override PartName="/{part}" ContentType="{kind}" /></Types>'.encode(),
                    )
            if item.filename not in replace:
                target.writestr(item, data)
        for name, make in replace.items():
            target.writestr(name, make())


HOSTILE = {
    # The reviewer's file: five million empty strings in a part named otherwise.
    "shared strings, renamed part": (
        {"xl/strings.xml": _repeated(b"<sst " + MAIN + b">", b"<si/>", 5_000_000, b"</sst>")},
        {"xl/strings.xml": SHARED_STRINGS},
        "(its shared strings) unpacks to 24 MB",
    ),
    # Within the 16 MB a shared-strings part may unpack to: refused by their count.
    "shared strings, many": (
        {"xl/sharedStrings.xml": _repeated(b"<sst " + MAIN + b">", b"<si/>", 3_000_000, b"</sst>")},
        {"xl/sharedStrings.xml": SHARED_STRINGS},
        "more than 200,000 shared strings",
    ),
    "styles": (
        {
            "xl/styles.xml": _repeated(
                b"<styleSheet " + MAIN + b"><cellXfs>",
                b"<xf/>",
                3_000_000,
                b"</cellXfs></styleSheet>",
            )
        },
        {},
        "XML elements of its parts other than sheets and shared strings above 100,000",
    ),
    "one wide row": (
        {
            "xl/worksheets/sheet1.xml": _repeated(
                b"<worksheet " + MAIN + b"><sheetData><row>",
                b"<c/>",
                8_000_000,
                b"</row></sheetData></worksheet>",
            )
        },
        {},
        "row 1 holds more than",
    ),
    "rows with heights": (
        {
            "xl/worksheets/sheet1.xml": _repeated(
                b"<worksheet " + MAIN + b"><sheetData>" + HEADER,
                b'<row ht="9" customHeight="1"/>',
                2_000_000,
                b"</sheetData></worksheet>",
            )
        },
        {},
        "rows",
    ),
}

#: Reads the dataset's rows to the end in a fresh process; prints the outcome and its peak.
READER = """
import json, sys
from pathlib import Path
from agentic_iqa.datasets import get_dataset
from agentic_iqa.datasets.base import DatasetFormatError
try:
    outcome = f"rows: {sum(1 for _ in get_dataset('spaq').rows(Path(sys.argv[1])))}"
except DatasetFormatError as error:
    outcome = str(error)
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"outcome": outcome, "peak": peak}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_workbook_under_10_mb_is_refused_within_500_mb(kind: str, tmp_path: Path) -> None:
    replace, overrides, message = HOSTILE[kind]
    _workbook(tmp_path / SPAQ_FILE, replace, overrides)
    assert (tmp_path / SPAQ_FILE).stat().st_size < 10 * 2**20
    done = subprocess.run(
        [sys.executable, "-c", READER, str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["peak"] < 500e6, (kind, f"{result['peak'] / 1e6:.0f} MB")
    assert result["outcome"].startswith("SPAQ: ") and "is refused" in result["outcome"]
    assert message in result["outcome"] and "\n" not in result["outcome"]


def test_a_workbook_within_the_counts_is_still_read(tmp_path: Path) -> None:
    """A sheet of 11,126 rows of shared strings (SPAQ's size) passes every count."""
    from agentic_iqa.datasets import get_dataset

    workbook = Workbook()
    workbook.active.append(["Image name", "MOS", "Brightness"])
    for index in range(11_125):
        workbook.active.append([f"{index:05d}.jpg", 50.0, "n/a"])
    (tmp_path / "Annotations").mkdir()
    workbook.save(tmp_path / SPAQ_FILE)
    rows = list(get_dataset("spaq").rows(tmp_path))
    assert len(rows) == 11_125 and rows[-1].item_id == "11124.jpg"
