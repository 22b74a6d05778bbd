"""KonIQ-10k, read from its own CSV files.

The download (http://database.mmsp-kn.de/koniq-10k-database.html) holds
``koniq10k_scores_and_distributions.csv`` with the columns ``image_name, c1..c5, c_total, MOS,
SD, MOS_zscore`` and the images in ``1024x768/`` (or the half-size ``512x384/``).  ``MOS`` is the
mean of the 1-5 ratings (higher is better) and is what this reader gives; ``MOS_zscore`` is the
0-100 rescaling of z-scored ratings that many papers and pyiqa train on, kept in ``meta``, or
the MOS itself with ``eval submit --score zscore`` (:meth:`KonIQ10k.scored`).

The official train/validation/test assignment is a second file, ``koniq10k_distributions_sets.csv``
(``metadata/`` of github.com/subpic/koniq), with ``image_name, c1..c5, c_total, MOS, SD, set``
(``set`` is ``training``, ``validation`` or ``test``).  Beware: its column named ``MOS`` is the
0-100 one (77.38 for ``10004473376.jpg``, whose 1-5 MOS is 3.83).  With both files, the scores
come from the first and the split from the second; with the sets file alone, the 1-5 MOS is the
mean of the rating distribution, ``1*c1 + ... + 5*c5`` (``c1``..``c5`` are the fractions of
ratings at each level), which matches the published 1-5 MOS of all 10073 images to the 0.01 it
is given in Q-Bench's ``a3_iqa_databases/jsons/koniq.json``.  Split ``all`` (the default) needs
either file; ``train``/``val``/``test`` need the sets file.

Sources checked: the sets file itself (subpic/koniq); the scores file's columns from loaders
that read ``row['MOS_zscore']`` from it (no copy of the file was available);
``scripts/process_koniq10k.py`` and ``pyiqa/default_dataset_configs.yml`` in chaofengc/IQA-PyTorch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from agentic_iqa.datasets.base import (
    DatasetFormatError,
    DatasetInfo,
    DatasetPath,
    DatasetProblem,
    DatasetRow,
)
from agentic_iqa.datasets.files import (
    BadRecord,
    choose_split,
    find_file,
    image_folder,
    joined,
    read_csv,
    score,
)

SCORES = "koniq10k_scores_and_distributions.csv"
SETS = "koniq10k_distributions_sets.csv"
LEVELS = ("c1", "c2", "c3", "c4", "c5")
SPLIT_OF_SET = {"training": "train", "validation": "val", "test": "test"}
#: The 0-100 scale of ``MOS_zscore`` (z-scored ratings rescaled), higher is better.
ZSCORE_RANGE = (0.0, 100.0)


def _distribution_mos(record: dict[str, str]) -> float | None:
    """The mean rating from the share of ratings at each of the five levels."""
    total = 0.0
    for level, column in enumerate(LEVELS, start=1):
        share = score(record.get(column))
        if share is None:
            return None
        total += level * share
    return total


class KonIQ10k:
    """KonIQ-10k: 1-5 MOS from the scores file (or the rating distribution), official sets;
    :meth:`scored` ``"zscore"`` gives the ``MOS_zscore`` column as the MOS instead."""

    #: The scores a job may be judged against (``eval submit --score``).
    scores = ("mos", "zscore")
    #: Which one this reader gives as each row's MOS.
    score = "mos"

    def scored(self, score: str) -> KonIQ10k:
        """The reader giving ``score`` as the MOS: ``zscore`` is the 0-100 ``MOS_zscore``
        (on its own scale; a row without it is a bad row), ``mos`` the 1-5 MOS."""
        if score not in self.scores:
            raise DatasetFormatError(f"KonIQ-10k publishes no {score!r} score: mos or zscore")
        reader = type(self)()
        reader.score = score
        if score == "zscore":
            reader.info = replace(self.info, mos_range=ZSCORE_RANGE)
        return reader

    info = DatasetInfo(
        name="koniq10k",
        title="KonIQ-10k",
        kind="score",
        mos_range=(1.0, 5.0),
        higher_is_better=True,
        full_reference=False,
        splits=("all", "train", "val", "test"),
        default_split="all",
        files=f"{SCORES} (and/or {SETS} for splits) and 1024x768/",
        url="http://database.mmsp-kn.de/koniq-10k-database.html",
    )

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        chosen = choose_split(self.info, split)
        first = find_file(root, self.info, SCORES, SETS)
        sets_path = root / SETS
        if chosen != "all" and not sets_path.is_file():
            raise DatasetFormatError(
                f"KonIQ-10k: split {chosen!r} needs {SETS} (metadata/ of "
                f"https://github.com/subpic/koniq) under {root}; pass --split all to read every "
                f"image of {SCORES}"
            )
        sets: dict[str, dict[str, str]] = {}
        sets_records: list[dict[str, str] | BadRecord] = []
        if sets_path.is_file():
            required = (
                ("image_name", "set")
                if first.name == SCORES
                else ("image_name", "set", "MOS", *LEVELS)
            )
            sets_records = read_csv(sets_path, self.info, required)
            sets = {
                record["image_name"]: record
                for record in sets_records
                if not isinstance(record, BadRecord)
            }
        if first.name == SCORES:
            records = read_csv(first, self.info, ("image_name", "MOS"))
        else:
            records = sets_records
        return self._rows(
            records, first.name, sets, chosen, image_folder(root, "1024x768", "512x384")
        )

    def _rows(
        self,
        records: list[dict[str, str] | BadRecord],
        file: str,
        sets: dict[str, dict[str, str]],
        chosen: str,
        folder: str,
    ) -> Iterator[DatasetRow | DatasetProblem]:
        for line, record in enumerate(records, start=1):
            if isinstance(record, BadRecord):
                yield DatasetProblem(line, f"{file}, record {line}: {record.reason}")
                continue
            name = record.get("image_name", "")
            where = f"{file}, record {line} ({name or 'no image_name'})"
            in_sets = sets.get(name)
            set_name = in_sets.get("set", "") if in_sets else ""
            if chosen != "all":
                if in_sets is None:
                    yield DatasetProblem(line, f"{where}: not in {SETS}, so in no split")
                    continue
                if SPLIT_OF_SET.get(set_name) is None:
                    yield DatasetProblem(line, f"{where}: unknown set {set_name!r} in {SETS}")
                    continue
                if SPLIT_OF_SET[set_name] != chosen:
                    continue
            if file == SCORES:
                mos, zscore = score(record.get("MOS")), score(record.get("MOS_zscore"))
                fault = f"MOS {record.get('MOS')!r} is not a number"
            else:
                mos, zscore = _distribution_mos(record), score(record.get("MOS"))
                fault = "the rating shares c1..c5 are not all numbers"
            if not name:
                yield DatasetProblem(line, f"{where}: no image name")
                continue
            if mos is None:
                yield DatasetProblem(line, f"{where}: {fault}")
                continue
            meta: dict[str, object] = {}
            if self.score == "zscore":  # the z-score is the truth; the 1-5 MOS stays beside it
                if zscore is None:
                    yield DatasetProblem(
                        line, f"{where}: no MOS_zscore (the score asked for with --score zscore)"
                    )
                    continue
                mos, zscore, meta["mos_1_5"] = zscore, None, mos
            if zscore is not None:
                meta["mos_zscore"] = zscore
            if (sd := score(record.get("SD"))) is not None:
                meta["sd"] = sd
            if set_name:
                meta["set"] = SPLIT_OF_SET.get(set_name, set_name)
            yield DatasetRow(
                line=line, image=joined(folder, name), mos=mos, item_id=name, meta=meta
            )


DATASET = KonIQ10k()
