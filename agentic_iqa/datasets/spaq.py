"""SPAQ (smartphone photography), read from its own spreadsheet.

The release (https://github.com/h4nwei/SPAQ) holds ``Annotations/MOS and Image attribute
scores.xlsx``, whose first sheet has the columns ``Image name, MOS, Brightness, Colorfulness,
Contrast, Noisiness, Sharpness``, and the 11125 photographs in ``TestImage/`` (``00001.jpg`` ...).
The MOS is on a 0-100 scale, higher is better; the five attribute scores go to ``meta``.

Sources checked: ``scripts/process_spaq.py`` and
``options/train/NIMA/train_NIMA_inception_spaq.yml`` in chaofengc/IQA-PyTorch (the file name,
``TestImage/``); public loaders reading the ``Image name`` and ``MOS`` columns; Q-Bench's
``a3_iqa_databases/jsons/spaq.json`` for the names and the range of the scores (2-96).  Many
works resize the photographs first; this reader points at the images as shipped.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from agentic_iqa.datasets.base import (
    DatasetFormatError,
    DatasetInfo,
    DatasetPath,
    DatasetProblem,
    DatasetRow,
)
from agentic_iqa.datasets.bounded import TooLarge, check_xlsx
from agentic_iqa.datasets.files import choose_split, find_file, joined, score

SCORES = "Annotations/MOS and Image attribute scores.xlsx"
ATTRIBUTES = ("Brightness", "Colorfulness", "Contrast", "Noisiness", "Sharpness")


def _sheet_rows(path: DatasetPath) -> Generator[tuple[Any, ...], None, None]:
    """The rows of the first sheet, the header first, streamed: openpyxl is imported only
    here, and opens the file only once its archive is within budget (:func:`check_xlsx`: a
    small XLSX can unpack to gigabytes of shared strings).

    Rows are read one at a time in read-only mode, so ``--limit`` stops the reading; each row
    is cut to the header's width, so a sheet that declares 16,384 columns costs none of them.
    The file is read through one open handle (it may be an object in a store), held until the
    last row.
    """
    from openpyxl import load_workbook

    with path.open("rb") as handle:
        try:
            check_xlsx(handle, path.name)
        except TooLarge as error:
            raise DatasetFormatError(f"SPAQ: {path} is refused: {error}") from None
        except ValueError as error:
            raise DatasetFormatError(
                f"SPAQ: {path} cannot be read as an XLSX file: {error}"
            ) from None
        try:
            handle.seek(0)
            workbook = load_workbook(handle, read_only=True, data_only=True)
            sheet = workbook.worksheets[0]
        except Exception as error:  # openpyxl raises several types for a file that is not XLSX
            raise DatasetFormatError(
                f"SPAQ: {path} cannot be read as an XLSX file: {error}"
            ) from None
        try:
            header = next(sheet.iter_rows(max_row=1, values_only=True), ())
            width = max(
                (index + 1 for index, cell in enumerate(header) if cell is not None), default=0
            )
            yield tuple(header[:width])
            if width:
                yield from sheet.iter_rows(min_row=2, max_col=width, values_only=True)
        finally:
            workbook.close()


class SPAQ:
    """SPAQ: 0-100 MOS from the annotations spreadsheet, images in ``TestImage/``."""

    info = DatasetInfo(
        name="spaq",
        title="SPAQ",
        kind="score",
        mos_range=(0.0, 100.0),
        higher_is_better=True,
        full_reference=False,
        splits=("all",),
        default_split="all",
        files=f"'{SCORES}' and TestImage/",
        url="https://github.com/h4nwei/SPAQ",
    )

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        choose_split(self.info, split)
        path = find_file(root, self.info, SCORES)
        table = _sheet_rows(path)
        first = next(table)
        header = [str(cell).strip() if cell is not None else "" for cell in first]
        missing = [name for name in ("Image name", "MOS") if name not in header]
        if missing:
            table.close()
            raise DatasetFormatError(
                f"SPAQ: the first sheet of {path} has no column {', '.join(missing)} (its "
                f"columns: {', '.join(name for name in header if name) or 'none'})"
            )
        return self._rows(header, table)

    def _rows(
        self, header: list[str], table: Iterator[tuple[Any, ...]]
    ) -> Iterator[DatasetRow | DatasetProblem]:
        line = 0
        while True:
            line += 1
            try:
                values = next(table)
            except StopIteration:
                return
            except Exception as error:  # broken XML mid-sheet: the records read so far stand
                yield DatasetProblem(
                    line,
                    f"{SCORES}: the sheet cannot be read from record {line} on: {str(error)[:200]}",
                )
                return
            if all(value is None or str(value).strip() == "" for value in values):
                continue
            record = dict(zip(header, values, strict=False))
            name = str(record.get("Image name") or "").strip()
            where = f"{SCORES}, record {line} ({name or 'no image name'})"
            mos = score(record.get("MOS"))
            if not name:
                yield DatasetProblem(line, f"{where}: no image name")
            elif mos is None:
                yield DatasetProblem(line, f"{where}: MOS {record.get('MOS')!r} is not a number")
            else:
                meta = {
                    attribute.lower(): value
                    for attribute in ATTRIBUTES
                    if (value := score(record.get(attribute))) is not None
                }
                yield DatasetRow(
                    line=line, image=joined("TestImage", name), mos=mos, item_id=name, meta=meta
                )


DATASET = SPAQ()
