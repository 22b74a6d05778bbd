"""Q-Bench A1 (LLVisionQA): multiple-choice questions on low-level vision, read from its JSON.

The release (https://huggingface.co/datasets/nanyangtu/LLVisionQA-QBench, linked from
github.com/Q-Future/Q-Bench ``data_release/``) holds ``llvisionqa_dev.json`` and
``llvisionqa_test.json`` and an archive of the images.  Each file is a JSON list of objects with
``img_path`` (a file name in the image folder), ``question``, ``candidates`` (the options, in
order), ``correct_ans`` (the right option's text; not in the test file, whose answers are kept
back) and the integer codes ``type`` and ``concern``.

The codes are given names in ``meta``: ``type`` 0/1/2 = yes-or-no/what/how and ``concern``
0/1/2/3 = distortion/others/in-context distortion/in-context others, the order of the columns of
the Q-Bench leaderboard and of the "Global Distortion, Global Others, Local Distortion, Local
Others" list in lmms-eval; Q-Bench's README shows "How is the lighting of this building?" with
type 2, concern 3.  The raw codes are kept as ``type_code``/``concern_code``.

Sources checked: the keys from Q-Bench's evaluation scripts (``llddata["img_path"]``,
``["candidates"]``, ``["correct_ans"]``, ``["type"]``, ``["concern"]``, indexing a 3x4 count
table) and HuggingFaceM4's conversion script (no ``correct_ans`` for test).  Unverified: the
name of the image folder (loaders use ``images/`` or ``images_llvisionqa/``), so the first of
those that exists under the root is used, else ``images/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agentic_iqa.datasets.base import (
    DatasetFormatError,
    DatasetInfo,
    DatasetPath,
    DatasetProblem,
    DatasetRow,
)
from agentic_iqa.datasets.bounded import read_json_file
from agentic_iqa.datasets.files import choose_split, find_file, image_folder, joined

QUESTION_TYPES = ("yes-or-no", "what", "how")
CONCERNS = ("distortion", "others", "in-context distortion", "in-context others")


def _named(code: Any, names: tuple[str, ...]) -> Any:
    """The name of an integer code, the value itself when it is not one of the codes."""
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code < len(names):
        return names[code]
    return code


class LLVisionQA:
    """Q-Bench A1 (LLVisionQA), splits ``dev`` (with answers) and ``test`` (answers kept back)."""

    info = DatasetInfo(
        name="qbench",
        title="Q-Bench LLVisionQA",
        kind="mcq",
        mos_range=None,
        higher_is_better=True,
        full_reference=False,
        splits=("dev", "test"),
        default_split="dev",
        files="llvisionqa_dev.json / llvisionqa_test.json and images/",
        url="https://github.com/Q-Future/Q-Bench",
    )

    def rows(
        self, root: DatasetPath, split: str | None = None
    ) -> Iterator[DatasetRow | DatasetProblem]:
        chosen = choose_split(self.info, split)
        path = find_file(root, self.info, f"llvisionqa_{chosen}.json")
        try:  # bounded in size and depth: the file comes from the internet
            records = read_json_file(path)
        except (UnicodeDecodeError, ValueError) as error:
            raise DatasetFormatError(
                f"Q-Bench: {path} is not JSON that can be read: {error}"
            ) from None
        if not isinstance(records, list):
            raise DatasetFormatError(
                f"Q-Bench: {path} holds a JSON {type(records).__name__}, not the list of "
                f"questions the release ships"
            )
        return self._rows(records, path.name, image_folder(root, "images", "images_llvisionqa"))

    def _rows(
        self, records: list[Any], file: str, folder: str
    ) -> Iterator[DatasetRow | DatasetProblem]:
        for line, record in enumerate(records, start=1):
            where = f"{file}, question {line}"
            if not isinstance(record, dict):
                yield DatasetProblem(line, f"{where}: not a JSON object")
                continue
            image, question = record.get("img_path"), record.get("question")
            candidates, answer = record.get("candidates"), record.get("correct_ans")
            if not isinstance(image, str) or not image.strip():
                yield DatasetProblem(line, f"{where}: no img_path")
            elif not isinstance(question, str) or not question.strip():
                yield DatasetProblem(line, f"{where} ({image}): no question")
            elif (
                not isinstance(candidates, list)
                or len(candidates) < 2
                or not all(isinstance(option, str) for option in candidates)
            ):
                yield DatasetProblem(
                    line,
                    f"{where} ({image}): candidates {candidates!r} is "
                    f"not a list of two or more texts",
                )
            elif answer is not None and answer not in candidates:
                yield DatasetProblem(
                    line, f"{where} ({image}): correct_ans {answer!r} is not one of the candidates"
                )
            else:
                meta: dict[str, Any] = {}
                if "type" in record:
                    meta["question_type"] = _named(record["type"], QUESTION_TYPES)
                    meta["type_code"] = record["type"]
                if "concern" in record:
                    meta["concern"] = _named(record["concern"], CONCERNS)
                    meta["concern_code"] = record["concern"]
                yield DatasetRow(
                    line=line,
                    image=joined(folder, image.strip()),
                    query=question.strip(),
                    options=tuple(candidates),
                    answer=answer,
                    meta=meta,
                )


DATASET = LLVisionQA()
