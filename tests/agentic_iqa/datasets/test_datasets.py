"""The dataset readers read each dataset's own files, as published, into rows with exact values;
bad records come back as problems, a folder that is not the dataset as a format error at once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from openpyxl import Workbook
from PIL import Image
from scipy.io import savemat

from agentic_iqa.datasets import (
    DatasetFormatError,
    DatasetProblem,
    DatasetRow,
    dataset_names,
    get_dataset,
)
from tests.conftest import REPO


def _image(path: Path) -> None:
    """A tiny image at ``path``, in the format its extension names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 3), (120, 80, 40)).save(path)


def _read(
    name: str, root: Path, split: str | None = None
) -> tuple[list[DatasetRow], list[DatasetProblem]]:
    records = list(get_dataset(name).rows(root, split))
    rows = [record for record in records if isinstance(record, DatasetRow)]
    problems = [record for record in records if isinstance(record, DatasetProblem)]
    assert len(rows) + len(problems) == len(records)
    for row in rows:
        json.dumps(row.meta)  # JSON-serialisable, as the job records it
    return rows, problems


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# LIVE-C ------------------------------------------------------------------------------------------

LIVEC_NAMES = [
    "t1.bmp",
    "t2.bmp",
    "t3.bmp",
    "t4.bmp",
    "t5.bmp",
    "t6.bmp",
    "t7.bmp",
    "1000.JPG",
    "1001.JPG",
    "1002.bmp",
]
LIVEC_MOS = [63.9, 25.3, 48.9, 35.9, 66.5, 54.6, 77.9, 48.25, float("nan"), 71.5]


def _livec(root: Path, names: list[str] = LIVEC_NAMES, mos: list[float] = LIVEC_MOS) -> Path:
    """The release's two MAT files: a cell array of names (n x 1) and a 1 x n MOS row."""
    (root / "Data").mkdir(parents=True)
    cells = np.empty((len(names), 1), dtype=object)
    for index, name in enumerate(names):
        cells[index, 0] = np.array([name])
    savemat(root / "Data" / "AllImages_release.mat", {"AllImages_release": cells})
    savemat(root / "Data" / "AllMOS_release.mat", {"AllMOS_release": np.array([mos])})
    for name in names[7:]:
        _image(root / "Images" / name)
    return root


def test_livec_leaves_out_the_seven_training_images_by_default(tmp_path: Path) -> None:
    rows, problems = _read("livec", _livec(tmp_path))
    assert [(row.line, row.image, row.mos, row.item_id) for row in rows] == [
        (8, "Images/1000.JPG", 48.25, "1000.JPG"),
        (10, "Images/1002.bmp", 71.5, "1002.bmp"),
    ]
    assert all(row.reference is None and row.query is None and row.meta == {} for row in rows)
    assert len(problems) == 1 and problems[0].line == 9
    assert "Data/AllMOS_release.mat" in problems[0].message
    assert "1001.JPG" in problems[0].message and "not a number" in problems[0].message


def test_livec_with_training_reads_them_from_their_folder(tmp_path: Path) -> None:
    root = _livec(tmp_path)
    rows, _ = _read("livec", root, "with-training")
    assert [row.line for row in rows] == [1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert (rows[0].image, rows[0].mos, rows[0].meta) == (
        "Images/t1.bmp",
        63.9,
        {"training_image": True},
    )
    (root / "Images" / "trainingImages").mkdir()
    rows, _ = _read("livec", root, "with-training")
    assert rows[6].image == "Images/trainingImages/t7.bmp"
    assert rows[7].image == "Images/1000.JPG"


def test_livec_names_and_scores_of_different_lengths_are_refused(tmp_path: Path) -> None:
    root = _livec(tmp_path, LIVEC_NAMES, LIVEC_MOS[:-1])
    with pytest.raises(DatasetFormatError, match="lists 10 images but .* has 9 scores"):
        get_dataset("livec").rows(root)


# KonIQ-10k ---------------------------------------------------------------------------------------

KONIQ_SCORES = (
    '"image_name","c1","c2","c3","c4","c5","c_total","MOS","SD","MOS_zscore"\n'
    '"10004473376.jpg",0,0,0.238095238,0.695238095,0.066666667,105,3.828571429,0.527277894,'
    "77.38362069\n"
    '"10007357496.jpg",0,0.03125,0.46875,0.489583333,0.010416667,96,3.479166667,0.580003025,'
    "68.72857143\n"
    '"10043785683.jpg",0,0,0.433962264,0.566037736,0,106,3.566037736,0.497974333,71.20432692\n'
    '"10050349236.jpg",0.0588,0.6765,0.2647,0,0,102,n/a,0.532846555,30.94181034\n'
)
KONIQ_SETS = (
    "image_name,c1,c2,c3,c4,c5,c_total,MOS,SD,set\n"
    "10004473376.jpg,0.0,0.0,0.238095238095,0.695238095238,0.0666666666667,105,77.3836206897,"
    "0.527277894494,training\n"
    "10007357496.jpg,0.0,0.03125,0.46875,0.489583333333,0.0104166666667,96,68.7285714286,"
    "0.580003024795,test\n"
    "10043785683.jpg,0.0,0.0,0.433962264151,0.566037735849,0.0,106,71.2043269231,"
    "0.497974333332,validation\n"
    "10050349236.jpg,0.0588235294118,0.676470588235,0.264705882353,0.0,0.0,102,30.9418103448,"
    "0.532846555181,test\n"
)


def test_koniq_reads_the_1_to_5_mos_of_the_scores_file(tmp_path: Path) -> None:
    _write(tmp_path / "koniq10k_scores_and_distributions.csv", KONIQ_SCORES)
    _image(tmp_path / "1024x768" / "10004473376.jpg")
    rows, problems = _read("koniq", tmp_path)
    assert [(row.line, row.image, row.mos, row.item_id) for row in rows] == [
        (1, "1024x768/10004473376.jpg", 3.828571429, "10004473376.jpg"),
        (2, "1024x768/10007357496.jpg", 3.479166667, "10007357496.jpg"),
        (3, "1024x768/10043785683.jpg", 3.566037736, "10043785683.jpg"),
    ]
    assert rows[0].meta == {"mos_zscore": 77.38362069, "sd": 0.527277894}
    assert [problem.line for problem in problems] == [4]
    assert (
        "koniq10k_scores_and_distributions.csv, record 4 (10050349236.jpg)" in problems[0].message
        and "'n/a'" in problems[0].message
    )


def test_koniq_official_splits_come_from_the_sets_file(tmp_path: Path) -> None:
    _write(tmp_path / "koniq10k_scores_and_distributions.csv", KONIQ_SCORES)
    _write(tmp_path / "koniq10k_distributions_sets.csv", KONIQ_SETS)
    rows, problems = _read("koniq10k", tmp_path, "test")
    assert [(row.image, row.mos, row.meta["set"]) for row in rows] == [
        ("1024x768/10007357496.jpg", 3.479166667, "test")
    ]
    assert [problem.line for problem in problems] == [4]  # in the test set, but no number
    assert [row.item_id for row in _read("koniq", tmp_path, "val")[0]] == ["10043785683.jpg"]
    assert [row.item_id for row in _read("koniq", tmp_path, "train")[0]] == ["10004473376.jpg"]
    assert [row.meta["set"] for row in _read("koniq", tmp_path, "all")[0]] == [
        "train",
        "test",
        "val",
    ]


def test_koniq_from_the_sets_file_alone_takes_the_mean_of_the_ratings(tmp_path: Path) -> None:
    _write(tmp_path / "koniq10k_distributions_sets.csv", KONIQ_SETS)
    (tmp_path / "512x384").mkdir()
    rows, problems = _read("koniq", tmp_path)
    # Its column named MOS is the 0-100 one; the 1-5 MOS is sum(k * ck) (3.83 published).
    assert [row.image for row in rows] == [
        "512x384/10004473376.jpg",
        "512x384/10007357496.jpg",
        "512x384/10043785683.jpg",
        "512x384/10050349236.jpg",
    ]
    assert rows[0].mos == pytest.approx(3.8285714, abs=1e-6)
    assert rows[0].meta == {"mos_zscore": 77.3836206897, "sd": 0.527277894494, "set": "train"}
    assert rows[3].mos == pytest.approx(
        0.0588235294118 + 2 * 0.676470588235 + 3 * 0.264705882353, abs=1e-12
    )
    assert problems == []


def test_koniq_splits_other_than_all_need_the_sets_file(tmp_path: Path) -> None:
    _write(tmp_path / "koniq10k_scores_and_distributions.csv", KONIQ_SCORES)
    with pytest.raises(DatasetFormatError) as caught:
        get_dataset("koniq").rows(tmp_path, "test")
    assert "koniq10k_distributions_sets.csv" in str(caught.value)
    assert "--split all" in str(caught.value)


def test_koniq_without_the_mos_column_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "koniq10k_scores_and_distributions.csv", "image_name,score\na.jpg,3\n")
    with pytest.raises(DatasetFormatError, match="no column MOS .*its columns: image_name, score"):
        get_dataset("koniq").rows(tmp_path)


# SPAQ --------------------------------------------------------------------------------------------


def _spaq(root: Path) -> Path:
    workbook = Workbook()
    sheet = workbook.active
    sheet.append(
        ["Image name", "MOS", "Brightness", "Colorfulness", "Contrast", "Noisiness", "Sharpness"]
    )
    sheet.append(["00001.jpg", 48.86, 54.1, 47.9, 51.2, 40.6, 49.0])
    sheet.append(["00002.jpg", 62.5, 60, 58, 61, 55, 63])
    sheet.append(["00003.jpg", "x", 1, 2, 3, 4, 5])
    sheet.append([None, None, None, None, None, None, None])
    sheet.append(["00004.jpg", 22.71, None, None, None, None, None])
    (root / "Annotations").mkdir(parents=True)
    workbook.save(root / "Annotations" / "MOS and Image attribute scores.xlsx")
    _image(root / "TestImage" / "00001.jpg")
    return root


def test_spaq_reads_the_spreadsheet(tmp_path: Path) -> None:
    rows, problems = _read("SPAQ", _spaq(tmp_path))
    assert [(row.line, row.image, row.mos, row.item_id) for row in rows] == [
        (1, "TestImage/00001.jpg", 48.86, "00001.jpg"),
        (2, "TestImage/00002.jpg", 62.5, "00002.jpg"),
        (5, "TestImage/00004.jpg", 22.71, "00004.jpg"),
    ]
    assert rows[0].meta == {
        "brightness": 54.1,
        "colorfulness": 47.9,
        "contrast": 51.2,
        "noisiness": 40.6,
        "sharpness": 49.0,
    }
    assert rows[2].meta == {}
    assert [problem.line for problem in problems] == [3]
    assert "MOS and Image attribute scores.xlsx, record 3 (00003.jpg)" in problems[0].message


def test_spaq_sheet_without_the_mos_column_is_refused(tmp_path: Path) -> None:
    workbook = Workbook()
    workbook.active.append(["Image name", "Score"])
    (tmp_path / "Annotations").mkdir()
    workbook.save(tmp_path / "Annotations" / "MOS and Image attribute scores.xlsx")
    with pytest.raises(DatasetFormatError, match="no column MOS"):
        get_dataset("spaq").rows(tmp_path)


# KADID-10k ---------------------------------------------------------------------------------------


def test_kadid_reads_quality_scores_and_references(tmp_path: Path) -> None:
    _write(
        tmp_path / "dmos.csv",
        "dist_img,ref_img,dmos,var\n"
        "I01_01_01.png,I01.png,4.57,0.496\n"
        "I01_01_05.png,I01.png,1.1,0.3\n"
        "I02_25_03.png,I02.png,abc,0.1\n"
        "I81_10_02.png,I81.png,3.2,0.2\n",
    )
    _image(tmp_path / "images" / "I01_01_01.png")
    rows, problems = _read("KADID-10k", tmp_path)
    assert [(row.line, row.image, row.reference, row.mos) for row in rows] == [
        (1, "images/I01_01_01.png", "images/I01.png", 4.57),
        (2, "images/I01_01_05.png", "images/I01.png", 1.1),
        (4, "images/I81_10_02.png", "images/I81.png", 3.2),
    ]
    assert rows[0].meta == {"distortion": "gaussian_blur", "distortion_index": 1, "level": 1}
    assert rows[2].meta == {"distortion": "jpeg", "distortion_index": 10, "level": 2}
    assert rows[0].item_id == "I01_01_01.png"
    assert [problem.line for problem in problems] == [3]
    assert "dmos.csv, record 3 (I02_25_03.png): dmos 'abc'" in problems[0].message


def test_kadid_is_on_1_to_5_higher_better_and_full_reference() -> None:
    info = get_dataset("kadid").info
    assert (info.mos_range, info.higher_is_better, info.full_reference) == ((1.0, 5.0), True, True)


# TID2013 -----------------------------------------------------------------------------------------

TID_LIST = (
    "5.51429 i01_01_1.bmp\n"
    "4.05714 i25_08_3.bmp\n"
    "\n"
    "abc i02_01_1.bmp\n"
    "6.0 weird.bmp\n"
    "3.5\n"
    "2.25 i03_24_5.bmp\n"
)


def test_tid2013_derives_references_as_the_release_spells_them(tmp_path: Path) -> None:
    _write(tmp_path / "mos_with_names.txt", TID_LIST)
    rows, problems = _read("tid2013", tmp_path)
    assert [(row.line, row.image, row.reference, row.mos) for row in rows] == [
        (1, "distorted_images/i01_01_1.bmp", "reference_images/I01.BMP", 5.51429),
        (2, "distorted_images/i25_08_3.bmp", "reference_images/i25.bmp", 4.05714),
        (7, "distorted_images/i03_24_5.bmp", "reference_images/I03.BMP", 2.25),
    ]
    assert rows[0].meta == {
        "distortion_index": 1,
        "level": 1,
        "distortion": "Additive Gaussian noise",
    }
    assert rows[1].meta == {"distortion_index": 8, "level": 3, "distortion": "Gaussian blur"}
    assert rows[2].meta["distortion"] == "Sparse sampling and reconstruction"
    assert rows[0].item_id == "i01_01_1.bmp"
    assert [problem.line for problem in problems] == [4, 5, 6]
    assert "mos_with_names.txt, line 4 (i02_01_1.bmp): MOS 'abc'" in problems[0].message
    assert "weird.bmp" in problems[1].message and "reference is unknown" in problems[1].message
    assert "'3.5' is not '<mos> <name>'" in problems[2].message


def test_tid2013_follows_the_case_of_the_files_on_disk(tmp_path: Path) -> None:
    _write(tmp_path / "mos_with_names.txt", TID_LIST)
    _image(tmp_path / "distorted_images" / "I01_01_1.bmp")
    _image(tmp_path / "distorted_images" / "i25_08_3.bmp")
    _image(tmp_path / "reference_images" / "i01.bmp")
    _image(tmp_path / "reference_images" / "i25.bmp")
    rows, _ = _read("tid", tmp_path)
    assert [(row.image, row.reference) for row in rows] == [
        ("distorted_images/I01_01_1.bmp", "reference_images/i01.bmp"),
        ("distorted_images/i25_08_3.bmp", "reference_images/i25.bmp"),
        ("distorted_images/i03_24_5.bmp", "reference_images/I03.BMP"),
    ]


# AGIQA-3K ----------------------------------------------------------------------------------------

AGIQA_CSV = (
    "name,prompt,adj1,adj2,style,mos_quality,std_quality,mos_align,std_align\n"
    "AttnGAN_normal_000.jpg,statue of a man,,,,0.965602553,0.223270101,0.40889324,0.615607722\n"
    'AttnGAN_normal_060.jpg,"artwork with only triangles, anime style",,,anime style,'
    "0.919776796,0.719282241,0.850496237,0.842552058\n"
    "sd1.5_lowcorr_018.jpg,a cat,,,,,0.5,1.2,0.3\n"
    "midjourney_normal_014.jpg,a dog,,,,4.488740784,0.4,x,0.2\n"
)


def test_agiqa_reads_quality_mos_and_keeps_the_prompt(tmp_path: Path) -> None:
    _write(tmp_path / "data.csv", AGIQA_CSV)
    rows, problems = _read("agiqa-3k", tmp_path)
    assert [(row.line, row.image, row.mos) for row in rows] == [
        (1, "images/AttnGAN_normal_000.jpg", 0.965602553),
        (2, "images/AttnGAN_normal_060.jpg", 0.919776796),
        (4, "images/midjourney_normal_014.jpg", 4.488740784),
    ]
    assert rows[1].meta == {
        "generator": "AttnGAN",
        "mos_align": 0.850496237,
        "prompt": "artwork with only triangles, anime style",
    }
    assert rows[2].meta == {"generator": "midjourney", "prompt": "a dog"}
    assert rows[0].query is None
    assert [problem.line for problem in problems] == [3]
    assert "data.csv, record 3 (sd1.5_lowcorr_018.jpg): mos_quality ''" in problems[0].message


def test_agiqa_uses_the_image_folder_that_is_there(tmp_path: Path) -> None:
    _write(tmp_path / "data.csv", AGIQA_CSV)
    _image(tmp_path / "database" / "AttnGAN_normal_000.jpg")
    rows, _ = _read("agiqa3k", tmp_path)
    assert rows[0].image == "database/AttnGAN_normal_000.jpg"


# Q-Bench LLVisionQA ------------------------------------------------------------------------------

QBENCH_DEV = [
    {
        "img_path": "00079.jpg",
        "question": "Is the image clear?",
        "candidates": ["Yes", "No"],
        "correct_ans": "No",
        "type": 0,
        "concern": 0,
    },
    {
        "img_path": "01001.jpg",
        "question": "How is the lighting of this building?",
        "candidates": ["High", "Low", "Medium"],
        "correct_ans": "Low",
        "type": 2,
        "concern": 3,
    },
    {
        "img_path": "01002.jpg",
        "question": "What distortion is most apparent?",
        "candidates": ["Blur", "Noise", "Overexposure", "Underexposure"],
        "correct_ans": "Fog",
        "type": 1,
        "concern": 2,
    },
    "not an object",
    {
        "img_path": "01003.jpg",
        "question": "Which part is out of focus?",
        "candidates": ["The sky", "The car"],
        "correct_ans": "The car",
        "type": 1,
        "concern": 1,
    },
    {
        "img_path": "01004.jpg",
        "question": "",
        "candidates": ["Yes", "No"],
        "correct_ans": "Yes",
        "type": 0,
        "concern": 1,
    },
]


def test_qbench_dev_gives_questions_options_and_answers(tmp_path: Path) -> None:
    _write(tmp_path / "llvisionqa_dev.json", json.dumps(QBENCH_DEV))
    _image(tmp_path / "images" / "00079.jpg")
    rows, problems = _read("qbench", tmp_path)
    assert [(row.line, row.image, row.query, row.options, row.answer) for row in rows] == [
        (1, "images/00079.jpg", "Is the image clear?", ("Yes", "No"), "No"),
        (
            2,
            "images/01001.jpg",
            "How is the lighting of this building?",
            ("High", "Low", "Medium"),
            "Low",
        ),
        (5, "images/01003.jpg", "Which part is out of focus?", ("The sky", "The car"), "The car"),
    ]
    assert rows[0].meta == {
        "question_type": "yes-or-no",
        "type_code": 0,
        "concern": "distortion",
        "concern_code": 0,
    }
    assert rows[1].meta == {
        "question_type": "how",
        "type_code": 2,
        "concern": "in-context others",
        "concern_code": 3,
    }
    assert rows[2].meta["question_type"] == "what" and rows[2].meta["concern"] == "others"
    assert all(row.mos is None and row.reference is None and row.item_id is None for row in rows)
    assert [problem.line for problem in problems] == [3, 4, 6]
    assert "llvisionqa_dev.json, question 3 (01002.jpg): correct_ans 'Fog'" in problems[0].message
    assert "not a JSON object" in problems[1].message and "no question" in problems[2].message


def test_qbench_test_split_has_no_answers(tmp_path: Path) -> None:
    test = [
        {key: value for key, value in record.items() if key != "correct_ans"}
        for record in QBENCH_DEV
        if isinstance(record, dict) and record["question"]
    ]
    _write(tmp_path / "llvisionqa_test.json", json.dumps(test))
    (tmp_path / "images_llvisionqa").mkdir()
    rows, problems = _read("llvisionqa", tmp_path, "test")
    assert [(row.image, row.answer) for row in rows] == [
        ("images_llvisionqa/00079.jpg", None),
        ("images_llvisionqa/01001.jpg", None),
        ("images_llvisionqa/01002.jpg", None),
        ("images_llvisionqa/01003.jpg", None),
    ]
    assert problems == []
    with pytest.raises(DatasetFormatError, match="llvisionqa_dev.json not found"):
        get_dataset("qbench").rows(tmp_path)


def test_qbench_file_that_is_not_a_list_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "llvisionqa_dev.json", json.dumps({"questions": QBENCH_DEV}))
    with pytest.raises(DatasetFormatError, match="holds a JSON dict, not the list"):
        get_dataset("qbench").rows(tmp_path)


# All readers -------------------------------------------------------------------------------------

MISSING = {
    "livec": "Data/AllImages_release.mat",
    "koniq10k": "koniq10k_scores_and_distributions.csv or koniq10k_distributions_sets.csv",
    "spaq": "Annotations/MOS and Image attribute scores.xlsx",
    "kadid10k": "dmos.csv",
    "tid2013": "mos_with_names.txt",
    "agiqa3k": "data.csv",
    "qbench": "llvisionqa_dev.json",
}


def test_the_registry_lists_every_reader() -> None:
    assert dataset_names() == sorted(MISSING)
    for name in dataset_names():
        info = get_dataset(name).info
        assert info.name == name
        assert info.default_split in info.splits
        assert (info.mos_range is None) == (info.kind == "mcq")


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("livec", "livec"),
        ("LIVE-C", "livec"),
        ("clive", "livec"),
        ("live_challenge", "livec"),
        ("koniq", "koniq10k"),
        ("KonIQ-10k", "koniq10k"),
        ("kadid", "kadid10k"),
        ("kadid-10k", "kadid10k"),
        ("TID2013", "tid2013"),
        ("spaq", "spaq"),
        ("agiqa3k", "agiqa3k"),
        ("AGIQA-3k", "agiqa3k"),
        ("qbench", "qbench"),
        ("Q-Bench", "qbench"),
        ("llvisionqa", "qbench"),
    ],
)
def test_aliases_name_the_same_reader(alias: str, name: str) -> None:
    assert get_dataset(alias).info.name == name


def test_an_unknown_dataset_lists_the_known_ones() -> None:
    with pytest.raises(DatasetFormatError) as caught:
        get_dataset("imagenet")
    message = str(caught.value)
    assert "'imagenet'" in message
    assert "agiqa3k, kadid10k, koniq10k, livec, qbench, spaq, tid2013" in message


@pytest.mark.parametrize("name", sorted(MISSING))
def test_a_missing_file_is_refused_when_rows_is_called(name: str, tmp_path: Path) -> None:
    with pytest.raises(DatasetFormatError) as caught:
        get_dataset(name).rows(tmp_path)  # not iterated: refused before the first row
    message = str(caught.value)
    assert f"{MISSING[name]} not found under {tmp_path}" in message
    assert "--root" in message


@pytest.mark.parametrize("name", sorted(MISSING))
def test_a_root_that_is_no_folder_is_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tmp_path / 'nowhere'} is not a")):
        get_dataset(name).rows(tmp_path / "nowhere")


@pytest.mark.parametrize("name", sorted(MISSING))
def test_an_unknown_split_names_the_known_ones(name: str, tmp_path: Path) -> None:
    info = get_dataset(name).info
    with pytest.raises(DatasetFormatError) as caught:
        get_dataset(name).rows(tmp_path, "holdout")
    assert "no split 'holdout'" in str(caught.value)
    assert f"--split {' | '.join(info.splits)}" in str(caught.value)


def test_importing_the_package_loads_neither_scipy_nor_openpyxl() -> None:
    code = (
        "import sys, agentic_iqa.datasets as d; d.dataset_names(); d.get_dataset('koniq'); "
        "print(sorted(m for m in ('scipy', 'openpyxl', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_a_dataset_file_under_a_web_root_is_never_fetched_from_where_it_redirects():
    """fsspec's web filesystem follows redirects by itself: under ``--root https://host/ds`` a
    file that answers 302 to another server must not make that server answer anything."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agentic_iqa.datasets.files import dataset_root

    hits: list[str] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.send_response(200)
            self.send_header("content-length", "9")
            self.end_headers()
            self.wfile.write(b"image,mos")

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *_: object) -> None:
            """Quiet."""

    other = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)

    class Root(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(302)
            self.send_header("location", f"http://127.0.0.1:{other.server_address[1]}/x.csv")
            self.send_header("content-length", "0")
            self.end_headers()

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *_: object) -> None:
            """Quiet."""

    root = ThreadingHTTPServer(("127.0.0.1", 0), Root)
    for server in (other, root):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        folder = dataset_root(f"http://127.0.0.1:{root.server_address[1]}/ds")
        assert (folder / "mos.csv").read_text() == ""  # the redirect's own (empty) answer
    finally:
        for server in (other, root):
            server.shutdown()
    assert hits == []
