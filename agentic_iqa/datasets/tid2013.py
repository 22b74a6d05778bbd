"""TID2013, read from its own ``mos_with_names.txt``.

The release (https://www.ponomarenko.info/tid2013.htm) holds ``mos_with_names.txt``, one
``<mos> <name>`` pair a line with no header (``5.51429 i01_01_1.bmp``: reference 01, distortion
type 01, level 1), ``distorted_images/`` and ``reference_images/``.  The MOS is on 0-9, higher is
better.  ``meta`` gets the distortion type (index and the readme's name for it) and the level
(1 mildest, 5 strongest) read from the name.

The reference is not in the file; it follows from the name, and the release spells the 25
references inconsistently: ``I01.BMP`` ... ``I24.BMP`` but ``i25.bmp``, and some distorted files
differ in case from the names in the list.  So both are spelled as on disk when the folders are
there (one listing each), and otherwise as pyiqa spells them (``I{nn}.BMP``, ``i25.bmp``, the
distorted name as listed).

Sources checked: ``scripts/process_tid.py`` and ``pyiqa/default_dataset_configs.yml`` in
chaofengc/IQA-PyTorch (``ref_name = f'I{name[1:3]}.BMP'``, then ``I25.BMP`` -> ``i25.bmp``, and a
fallback to an upper-case ``I`` for distorted names that do not exist); public MATLAB and Python
loaders with the same fallbacks; the distortion names from a loader that quotes the readme's
TABLE I.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from agentic_iqa.datasets.base import DatasetInfo, DatasetPath, DatasetProblem, DatasetRow
from agentic_iqa.datasets.files import case_names, choose_split, find_file, joined, score

SCORES = "mos_with_names.txt"
DISTORTIONS = (
    "Additive Gaussian noise",
    "Additive noise in color components is more intensive than additive noise in the luminance "
    "component",
    "Spatially correlated noise",
    "Masked noise",
    "High frequency noise",
    "Impulse noise",
    "Quantization noise",
    "Gaussian blur",
    "Image denoising",
    "JPEG compression",
    "JPEG2000 compression",
    "JPEG transmission errors",
    "JPEG2000 transmission errors",
    "Non eccentricity pattern noise",
    "Local block-wise distortions of different intensity",
    "Mean shift (intensity shift)",
    "Contrast change",
    "Change of color saturation",
    "Multiplicative Gaussian noise",
    "Comfort noise",
    "Lossy compression of noisy images",
    "Image color quantization with dither",
    "Chromatic aberrations",
    "Sparse sampling and reconstruction",
)
_NAME = re.compile(r"^i(\d\d)_(\d\d)_(\d)\.bmp$", re.IGNORECASE)


def reference_name(number: int) -> str:
    """The reference as the release spells it: upper case, except the 25th."""
    return "i25.bmp" if number == 25 else f"I{number:02d}.BMP"


class TID2013:
    """TID2013: 0-9 MOS, distorted images and their references."""

    info = DatasetInfo(
        name="tid2013",
        title="TID2013",
        kind="score",
        mos_range=(0.0, 9.0),
        higher_is_better=True,
        full_reference=True,
        splits=("all",),
        default_split="all",
        files=f"{SCORES}, distorted_images/ and reference_images/",
        url="https://www.ponomarenko.info/tid2013.htm",
    )

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        choose_split(self.info, split)
        path = find_file(root, self.info, SCORES)
        lines = path.read_bytes().splitlines()
        return self._rows(
            lines, case_names(root / "distorted_images"), case_names(root / "reference_images")
        )

    def _rows(
        self, lines: list[bytes], distorted: dict[str, str], references: dict[str, str]
    ) -> Iterator[DatasetRow | DatasetProblem]:
        for line, raw in enumerate(lines, start=1):
            where = f"{SCORES}, line {line}"
            try:  # line by line, so a stray byte is the fault of its line alone
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                yield DatasetProblem(
                    line, f"{where}: is not UTF-8 text (byte 0x{raw[error.start]:02x})"
                )
                continue
            fields = text.split()
            if not fields:
                continue
            if len(fields) != 2:
                yield DatasetProblem(line, f"{where}: {text.strip()!r} is not '<mos> <name>'")
                continue
            value, name = fields
            mos, match = score(value), _NAME.match(name)
            if mos is None:
                yield DatasetProblem(line, f"{where} ({name}): MOS {value!r} is not a number")
            elif match is None:
                yield DatasetProblem(
                    line,
                    f"{where}: {name!r} is not of the form iNN_TT_L.bmp, "
                    f"so its reference is unknown",
                )
            else:
                number, index, level = (int(group) for group in match.groups())
                reference = reference_name(number)
                meta: dict[str, object] = {"distortion_index": index, "level": level}
                if 1 <= index <= len(DISTORTIONS):
                    meta["distortion"] = DISTORTIONS[index - 1]
                yield DatasetRow(
                    line=line,
                    image=joined("distorted_images", distorted.get(name.lower(), name)),
                    reference=joined(
                        "reference_images", references.get(reference.lower(), reference)
                    ),
                    mos=mos,
                    item_id=name,
                    meta=meta,
                )


DATASET = TID2013()
