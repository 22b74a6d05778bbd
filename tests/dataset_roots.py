"""Public datasets in their own layouts, made of the shared LIVE-C photos and their real MOS:
for tests that submit ``--dataset NAME --root DIR`` (the real files are not in the data folder).

KonIQ-10k: its scores file (``MOS`` on 1-5, ``MOS_zscore`` on 0-100) and ``1024x768/``, the
LIVE-C MOS rescaled onto 1-5 for ``MOS`` and kept as it is for ``MOS_zscore`` (so the two
scores differ, and rank alike).  LIVE-C: the release's two MAT files and ``Images/``, the 7
training entries first (the reader leaves them out of split ``all``).
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
from scipy.io import savemat


def livec_rows(livec_dir: Path, count: int, skip: int = 0) -> list[tuple[str, float]]:
    """(file name, MOS 0-100) of ``count`` photos of the shared folder, after ``skip``."""
    with (livec_dir / "mos.csv").open() as handle:
        rows = list(csv.DictReader(handle))[skip : skip + count]
    return [(row["image"], float(row["mos"])) for row in rows]


def koniq_root(livec_dir: Path, root: Path, count: int = 3) -> Path:
    """A KonIQ-10k folder with ``count`` photos."""
    folder = root / "1024x768"
    folder.mkdir(parents=True)
    lines = ['"image_name","c1","c2","c3","c4","c5","c_total","MOS","SD","MOS_zscore"']
    for name, mos in livec_rows(livec_dir, count):
        shutil.copy(livec_dir / "images" / name, folder / name)
        lines.append(f'"{name}",0.1,0.2,0.4,0.2,0.1,100,{1 + 4 * mos / 100:.4f},0.6,{mos:.4f}')
    (root / "koniq10k_scores_and_distributions.csv").write_text("\n".join(lines) + "\n")
    return root


def livec_root(livec_dir: Path, root: Path, count: int = 3) -> Path:
    """A LIVE-C release folder with ``count`` photos (other photos than :func:`koniq_root`)."""
    (root / "Data").mkdir(parents=True)
    (root / "Images").mkdir()
    rows = livec_rows(livec_dir, count, skip=10)
    names = [f"t{index}.bmp" for index in range(1, 8)] + [name for name, _ in rows]
    mos = [50.0] * 7 + [value for _, value in rows]
    cells = np.empty((len(names), 1), dtype=object)
    for index, name in enumerate(names):
        cells[index, 0] = np.array([name])
    savemat(root / "Data" / "AllImages_release.mat", {"AllImages_release": cells})
    savemat(root / "Data" / "AllMOS_release.mat", {"AllMOS_release": np.array([mos])})
    for name, _ in rows:
        shutil.copy(livec_dir / "images" / name, root / "Images" / name)
    return root
