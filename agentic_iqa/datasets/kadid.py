"""KADID-10k, read from its own ``dmos.csv``.

The download (http://database.mmsp-kn.de/kadid-10k-database.html) unpacks to ``dmos.csv``, with
the columns ``dist_img, ref_img, dmos, var``, and ``images/``, which holds the 10125 distorted
images (``I01_01_01.png``: reference 01, distortion type 01, level 01) and the 81 references
(``I01.png``) side by side.

Despite its name, ``dmos`` is not a difference score where lower is better: it is on 1-5 and
higher is better.  Checked against Q-Bench's ``a3_iqa_databases/jsons/kadid.json``, where
``I01_01_01.png`` (the mildest Gaussian blur) has 4.57 and ``I01_01_05.png`` (the strongest) 1.1,
and pyiqa's ``default_dataset_configs.yml`` (``mos_range: [1, 5]``, ``lower_better: false``).
``meta`` gets the distortion type (index and name, from the KADID-10k readme's list of 25, as
used by public loaders) and the level (1 mildest, 5 strongest) read from the file name.

Sources checked: ``scripts/process_kadid10k.py`` and
``options/train/WaDIQaM/train_WaDIQaM_FR_kadid.yml`` in chaofengc/IQA-PyTorch; public loaders
that read the ``dist_img,ref_img,dmos,var`` header.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from agentic_iqa.datasets.base import DatasetInfo, DatasetPath, DatasetProblem, DatasetRow
from agentic_iqa.datasets.files import (
    BadRecord,
    choose_split,
    find_file,
    joined,
    read_csv,
    score,
)

SCORES = "dmos.csv"
DISTORTIONS = (
    "gaussian_blur",
    "lens_blur",
    "motion_blur",
    "color_diffusion",
    "color_shift",
    "color_quantization",
    "color_saturation_1",
    "color_saturation_2",
    "jpeg2000",
    "jpeg",
    "white_noise",
    "white_noise_color_component",
    "impulse_noise",
    "multiplicative_noise",
    "denoise",
    "brighten",
    "darken",
    "mean_shift",
    "jitter",
    "non_eccentricity_patch",
    "pixelate",
    "quantization",
    "color_block",
    "high_sharpen",
    "contrast_change",
)


def distortion_of(name: str) -> dict[str, object]:
    """Type and level from ``Iref_type_level.png``; nothing when the name is not of that form."""
    parts = Path(name).stem.split("_")
    if len(parts) != 3 or not all(part.isdigit() for part in parts[1:]):
        return {}
    index, level = int(parts[1]), int(parts[2])
    if not 1 <= index <= len(DISTORTIONS):
        return {}
    return {"distortion": DISTORTIONS[index - 1], "distortion_index": index, "level": level}


class KADID10k:
    """KADID-10k: 1-5 quality scores (higher is better), distorted and reference in ``images/``."""

    info = DatasetInfo(
        name="kadid10k",
        title="KADID-10k",
        kind="score",
        mos_range=(1.0, 5.0),
        higher_is_better=True,
        full_reference=True,
        splits=("all",),
        default_split="all",
        files=f"{SCORES} and images/",
        url="http://database.mmsp-kn.de/kadid-10k-database.html",
    )

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        choose_split(self.info, split)
        path = find_file(root, self.info, SCORES)
        return self._rows(read_csv(path, self.info, ("dist_img", "ref_img", "dmos")))

    def _rows(
        self, records: list[dict[str, str] | BadRecord]
    ) -> Iterator[DatasetRow | DatasetProblem]:
        for line, record in enumerate(records, start=1):
            if isinstance(record, BadRecord):
                yield DatasetProblem(line, f"{SCORES}, record {line}: {record.reason}")
                continue
            name, reference = record["dist_img"], record["ref_img"]
            where = f"{SCORES}, record {line} ({name or 'no dist_img'})"
            mos = score(record["dmos"])
            if not name or not reference:
                yield DatasetProblem(line, f"{where}: dist_img or ref_img is empty")
            elif mos is None:
                yield DatasetProblem(line, f"{where}: dmos {record['dmos']!r} is not a number")
            else:
                yield DatasetRow(
                    line=line,
                    image=joined("images", name),
                    reference=joined("images", reference),
                    mos=mos,
                    item_id=name,
                    meta=distortion_of(name),
                )


DATASET = KADID10k()
