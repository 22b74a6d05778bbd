"""AGIQA-3K (AI-generated images), read from its own ``data.csv``.

The repository (https://github.com/lcysyzxdxc/AGIQA-3k-Database) publishes ``data.csv`` with the
columns ``name, prompt, adj1, adj2, style, mos_quality, std_quality, mos_align, std_align``, one
row per image (2982 rows, ``AttnGAN_normal_000.jpg``: generator, setting, number), and links the
images as an archive.  The score read is ``mos_quality`` (perceptual quality, higher is better);
``mos_align`` (agreement with the prompt), the prompt and the generator go to ``meta``.

Checked against ``data.csv`` itself: the columns, and ``mos_quality`` running from 0.0 to 4.49.
Unverified: the published scale, taken as 0-5 (the paper was not available), and the name of the
image folder in the archive (not browsable).  Loaders use ``images/``; Q-Bench's scripts use
``database/``; so the first of ``images/``, ``database/``, ``AGIQA-3K/`` that exists under the
root is used, else ``images/``.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentic_iqa.datasets.base import DatasetInfo, DatasetPath, DatasetProblem, DatasetRow
from agentic_iqa.datasets.files import (
    BadRecord,
    choose_split,
    find_file,
    image_folder,
    joined,
    read_csv,
    score,
)

SCORES = "data.csv"
FOLDERS = ("images", "database", "AGIQA-3K")


class AGIQA3K:
    """AGIQA-3K: perceptual-quality MOS of generated images, with their prompts."""

    info = DatasetInfo(
        name="agiqa3k",
        title="AGIQA-3K",
        kind="score",
        mos_range=(0.0, 5.0),
        higher_is_better=True,
        full_reference=False,
        splits=("all",),
        default_split="all",
        files=f"{SCORES} and the image folder ({', '.join(f'{name}/' for name in FOLDERS)})",
        url="https://github.com/lcysyzxdxc/AGIQA-3k-Database",
    )

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        choose_split(self.info, split)
        path = find_file(root, self.info, SCORES)
        records = read_csv(path, self.info, ("name", "mos_quality"))
        return self._rows(records, image_folder(root, *FOLDERS))

    def _rows(
        self, records: list[dict[str, str] | BadRecord], folder: str
    ) -> Iterator[DatasetRow | DatasetProblem]:
        for line, record in enumerate(records, start=1):
            if isinstance(record, BadRecord):
                yield DatasetProblem(line, f"{SCORES}, record {line}: {record.reason}")
                continue
            name = record["name"]
            where = f"{SCORES}, record {line} ({name or 'no name'})"
            mos = score(record["mos_quality"])
            if not name:
                yield DatasetProblem(line, f"{where}: no image name")
            elif mos is None:
                yield DatasetProblem(
                    line, f"{where}: mos_quality {record['mos_quality']!r} is not a number"
                )
            else:
                meta: dict[str, object] = {"generator": name.split("_", 1)[0]}
                if record.get("prompt"):
                    meta["prompt"] = record["prompt"]
                if (align := score(record.get("mos_align"))) is not None:
                    meta["mos_align"] = align
                yield DatasetRow(
                    line=line, image=joined(folder, name), mos=mos, item_id=name, meta=meta
                )


DATASET = AGIQA3K()
