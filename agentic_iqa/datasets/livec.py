"""LIVE In the Wild Image Quality Challenge (LIVE-C, CLIVE), read from its own MAT files.

The release (https://live.ece.utexas.edu/research/ChallengeDB/index.html) unpacks to
``Data/AllImages_release.mat`` (a MATLAB cell array of file names, one per image),
``Data/AllMOS_release.mat`` (the MOS, same order) and ``Images/``.  The MOS is on the study's
0-100 slider, higher is better.

The first 7 entries (``t1.bmp`` ... ``t7.bmp``) are the images shown to subjects to train them;
the other 1162 are in ``Images/``.
pyiqa drops the first 7 "as previous works" (``pyiqa/data/livechallenge_dataset.py`` in
chaofengc/IQA-PyTorch, ``self.paths_mos[7:]``; ``scripts/process_livechallenge.py`` there reads
the two MAT files as ``names['AllImages_release'][i][0][0]`` and ``AllMOS_release[0]``), and so
does the usual 1162-image protocol: split ``all`` is those 1162, split ``with-training`` adds the
7 training images.  Sources checked: IQA-PyTorch (above); the 7 names and their MOS in Q-Bench's
``a3_iqa_databases/jsons/livec.json`` (Q-Future/Q-Bench).

Unverified: where the release keeps the 7 training images.  One public loader reads them from
``Images/trainingImages/``, Q-Bench's own script from ``Images/``; the release's README was not
available.  So ``Images/trainingImages/`` is used when that folder exists, ``Images/`` otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from agentic_iqa.datasets.base import (
    DatasetFormatError,
    DatasetInfo,
    DatasetPath,
    DatasetProblem,
    DatasetRow,
)
from agentic_iqa.datasets.bounded import check_mat
from agentic_iqa.datasets.files import choose_split, find_file, image_folder, joined, score

NAMES = "Data/AllImages_release.mat"
MOS = "Data/AllMOS_release.mat"
TRAINING_IMAGES = 7


def _mat_array(path: DatasetPath, key: str) -> Any:
    """The variable ``key`` of a MAT file, flattened; scipy is imported only here, and loads
    the file only once its declared and inflated sizes are within budget (:func:`check_mat`).
    Read through an open handle, so the file may be an object in a store."""
    from scipy.io import loadmat

    try:
        check_mat(path)
        with path.open("rb") as handle:
            content = loadmat(handle)
    except Exception as error:  # scipy raises several types for a file that is not MAT
        raise DatasetFormatError(f"LIVE-C: {path} cannot be read as a MAT file: {error}") from None
    if key not in content:
        found = ", ".join(name for name in content if not name.startswith("__"))
        raise DatasetFormatError(f"LIVE-C: {path} has no variable {key} (it has: {found})")
    return content[key].ravel()


def _cell_text(cell: Any) -> str:
    """A MATLAB cell's string: loadmat wraps it in one or two nested arrays; anything else (a
    number, an empty cell, deeper nesting) is no name, and the record says so."""
    for _ in range(8):
        if isinstance(cell, str):
            return cell.strip()
        if not isinstance(cell, np.ndarray) or cell.size == 0:
            return ""
        cell = cell.ravel()[0]
    return ""


class LiveChallenge:
    """LIVE-C from ``Data/*.mat``, images under ``Images/``."""

    info = DatasetInfo(
        name="livec",
        title="LIVE-C",
        kind="score",
        mos_range=(0.0, 100.0),
        higher_is_better=True,
        full_reference=False,
        splits=("all", "with-training"),
        default_split="all",
        files=f"{NAMES}, {MOS} and Images/",
        url="https://live.ece.utexas.edu/research/ChallengeDB/index.html",
    )

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        chosen = choose_split(self.info, split)
        names_path = find_file(root, self.info, NAMES)
        mos_path = find_file(root, self.info, MOS)
        names = [_cell_text(cell) for cell in _mat_array(names_path, "AllImages_release")]
        scores = _mat_array(mos_path, "AllMOS_release")
        if len(names) != len(scores):
            raise DatasetFormatError(
                f"LIVE-C: {names_path} lists {len(names)} images but {mos_path} has "
                f"{len(scores)} scores; are both from the same release?"
            )
        start = 0 if chosen == "with-training" else TRAINING_IMAGES
        return self._rows(
            names, scores, start, image_folder(root, "Images/trainingImages", "Images")
        )

    def _rows(
        self, names: list[str], scores: Any, start: int, training_folder: str
    ) -> Iterator[DatasetRow | DatasetProblem]:
        for index in range(start, len(names)):
            line, name = index + 1, names[index]
            mos = score(scores[index])
            if not name:
                yield DatasetProblem(line, f"{NAMES}, entry {line}: no image name")
            elif mos is None:
                yield DatasetProblem(
                    line, f"{MOS}, entry {line} ({name}): MOS {scores[index]} is not a number"
                )
            else:
                folder = training_folder if index < TRAINING_IMAGES else "Images"
                yield DatasetRow(
                    line=line,
                    image=joined(folder, name),
                    mos=mos,
                    item_id=name,
                    meta={"training_image": True} if index < TRAINING_IMAGES else {},
                )


DATASET = LiveChallenge()
