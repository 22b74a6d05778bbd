"""Files from strangers: every dataset reader and manifest format, fed paths that leave the
root (``..``, absolute, a symlink), NUL bytes, bytes that are not UTF-8, values nested too deep
and archives that unpack to far more than they weigh.  Each hostile record is one bad row with
its line and reason, the rest of the file runs, nothing outside the root is opened, and a bomb
is one line, at once."""

from __future__ import annotations

import io
import json
import struct
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from openpyxl import Workbook
from PIL import Image
from scipy.io import savemat
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.datasets import DatasetFormatError, get_dataset
from agentic_iqa.jobs.manifest import (
    ManifestError,
    ManifestFormatError,
    ManifestItem,
    read_manifest,
)
from agentic_iqa.jobs.sources import dataset_entries

runner = CliRunner()
DEEP = "[" * 200_000 + "]" * 200_000


def _image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (40, 40), (120, 80, 40)).save(path)
    return path


def _by_line(entries: list) -> dict[int, ManifestItem | ManifestError]:
    return {entry.line: entry for entry in entries}


def _bad(entry: ManifestItem | ManifestError) -> str:
    assert isinstance(entry, ManifestError), f"read as an item: {entry}"
    return entry.message


@pytest.fixture()
def places(tmp_path: Path) -> dict[str, Path]:
    """A dataset root, and a real image outside it that no hostile name may reach."""
    root = tmp_path / "ds"
    root.mkdir()
    return {"root": root, "secret": _image(tmp_path / "outside" / "secret.png")}


# -- one writer per reader, in the dataset's own format; each takes the names to list --------------


def _koniq(root: Path, names: list[str]) -> str:
    lines = ['"image_name","c1","c2","c3","c4","c5","c_total","MOS","SD","MOS_zscore"']
    lines += [f'"{name}",0,0,0.5,0.5,0,100,3.5,0.5,70' for name in names]
    (root / "koniq10k_scores_and_distributions.csv").write_text("\n".join(lines) + "\n")
    return "1024x768"


def _kadid(root: Path, names: list[str]) -> str:
    _image(root / "images" / "I01.png")
    text = "dist_img,ref_img,dmos,var\n" + "".join(f"{name},I01.png,3.0,0.1\n" for name in names)
    (root / "dmos.csv").write_text(text)
    return "images"


def _agiqa(root: Path, names: list[str]) -> str:
    text = "name,prompt,mos_quality\n" + "".join(f"{name},a cat,3.0\n" for name in names)
    (root / "data.csv").write_text(text)
    (root / "images").mkdir(exist_ok=True)
    return "images"


def _spaq(root: Path, names: list[str]) -> str:
    workbook = Workbook()
    workbook.active.append(["Image name", "MOS"])
    for name in names:
        workbook.active.append([name, 50.0])
    (root / "Annotations").mkdir()
    workbook.save(root / "Annotations" / "MOS and Image attribute scores.xlsx")
    return "TestImage"


def _livec(root: Path, names: list[str]) -> str:
    listed = [f"t{index}.bmp" for index in range(1, 8)] + names
    cells = np.empty((len(listed), 1), dtype=object)
    for index, name in enumerate(listed):
        cells[index, 0] = np.array([name])
    (root / "Data").mkdir()
    savemat(root / "Data" / "AllImages_release.mat", {"AllImages_release": cells})
    savemat(
        root / "Data" / "AllMOS_release.mat", {"AllMOS_release": np.array([[50.0] * len(listed)])}
    )
    return "Images"


def _qbench(root: Path, names: list[str]) -> str:
    records = [
        {
            "img_path": name,
            "question": "Is it blurry?",
            "candidates": ["Yes", "No"],
            "correct_ans": "Yes",
            "type": 0,
            "concern": 0,
        }
        for name in names
    ]
    (root / "llvisionqa_dev.json").write_text(json.dumps(records))
    return "images"


WRITERS = {
    "koniq10k": _koniq,
    "kadid10k": _kadid,
    "agiqa3k": _agiqa,
    "spaq": _spaq,
    "livec": _livec,
    "qbench": _qbench,
}


def _dataset(name: str, root: Path, names: list[str]) -> dict[int, ManifestItem | ManifestError]:
    _, entries = dataset_entries(name, root, check_images=False)
    return _by_line(list(entries))


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_no_dataset_file_reaches_outside_its_root(name: str, places: dict[str, Path]) -> None:
    root, secret = places["root"], places["secret"]
    folder = WRITERS[name](
        root,
        [
            "good.png",
            "../../outside/secret.png",
            str(secret),
            "link.png",
            "../" * 12 + "etc/shadow",
        ],
    )
    _image(root / folder / "good.png")
    (root / folder / "link.png").symlink_to(secret)
    found = _dataset(name, root, [])
    first = min(found)  # LIVE-C numbers its entries after the 7 training images
    assert isinstance(found[first], ManifestItem)
    for offset, how in [(1, "'..'"), (2, "absolute"), (3, "symlink"), (4, "'..'")]:
        message = _bad(found[first + offset])
        assert "path escapes --root" in message and how in message, message
        assert "not found" not in message  # refused before anything was looked up


def test_tid2013_references_and_images_are_confined_too(places: dict[str, Path]) -> None:
    root, secret = places["root"], places["secret"]
    (root / "mos_with_names.txt").write_text("5.5 i01_01_1.bmp\n4.0 i02_01_1.bmp\n")
    _image(root / "distorted_images" / "i01_01_1.bmp")
    (root / "distorted_images" / "i02_01_1.bmp").symlink_to(secret)
    (root / "reference_images").mkdir()
    (root / "reference_images" / "I01.BMP").symlink_to(secret)
    found = _dataset("tid2013", root, [])
    assert "reference 'reference_images/I01.BMP' on line 1: path escapes" in _bad(found[1])
    assert "image 'distorted_images/i02_01_1.bmp' on line 2: path escapes" in _bad(found[2])


@pytest.mark.parametrize("name", ["koniq10k", "kadid10k", "agiqa3k", "qbench"])
def test_a_nul_byte_in_a_dataset_path_is_one_bad_row(name: str, places: dict[str, Path]) -> None:
    root = places["root"]
    folder = WRITERS[name](root, ["a\x00b.png", "good.png"])
    _image(root / folder / "good.png")
    found = _dataset(name, root, [])
    first = min(found)
    assert "NUL byte" in _bad(found[first])
    assert isinstance(found[first + 1], ManifestItem)


@pytest.mark.parametrize(
    ("name", "file", "header"),
    [
        ("koniq10k", "koniq10k_scores_and_distributions.csv", "image_name,MOS\n"),
        ("kadid10k", "dmos.csv", "dist_img,ref_img,dmos\n"),
        ("agiqa3k", "data.csv", "name,mos_quality\n"),
    ],
)
def test_bytes_that_are_not_utf8_spoil_their_record_only(
    name: str, file: str, header: str, places: dict[str, Path]
) -> None:
    root = places["root"]
    WRITERS[name](root, [])
    ref = ",I01.png" if name == "kadid10k" else ""
    body = f"good.png{ref},3.0\n".encode() + b"caf\xe9.png" + f"{ref},3.0\n".encode()
    body += f"also.png{ref},3.0\n".encode()
    (root / file).write_bytes(header.encode() + body)
    found = _dataset(name, root, [])
    assert "not UTF-8" in _bad(found[2]) and "0xe9" in _bad(found[2])
    assert all(
        isinstance(found[line], ManifestError) and "not UTF-8" not in found[line].message
        for line in (1, 3)
    )  # missing images, but read


def test_tid2013_a_line_that_is_not_utf8_is_one_bad_row(places: dict[str, Path]) -> None:
    root = places["root"]
    (root / "mos_with_names.txt").write_bytes(b"5.5 i01_01_1.bmp\n4.0 i0\xff_01_1.bmp\n")
    found = _dataset("tid2013", root, [])
    assert "not UTF-8" in _bad(found[2]) and "not UTF-8" not in _bad(found[1])


def test_a_qbench_file_nested_too_deep_is_one_line(places: dict[str, Path]) -> None:
    root = places["root"]
    (root / "llvisionqa_dev.json").write_text(DEEP)
    with pytest.raises(ManifestFormatError, match="nested deeper than") as caught:
        dataset_entries("qbench", root)
    assert "\n" not in str(caught.value)


# -- manifests: CSV, JSONL, JSON ------------------------------------------------------------------


def _manifest(kind: str, folder: Path, images: list[str]) -> Path:
    rows = [{"image": image, "mos": 3} for image in images]
    path = folder / f"m.{kind}"
    if kind == "csv":
        path.write_text("image,mos\n" + "".join(f"{row['image']},3\n" for row in rows))
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        path.write_text(json.dumps(rows))
    return path


@pytest.mark.parametrize("kind", ["csv", "jsonl", "json"])
def test_root_confines_every_manifest_format(kind: str, places: dict[str, Path]) -> None:
    root, secret = places["root"], places["secret"]
    _image(root / "good.png")
    (root / "link.png").symlink_to(secret)
    path = _manifest(
        kind, root, ["good.png", "../outside/secret.png", str(secret), "link.png", "a\x00b.png"]
    )
    found = list(read_manifest(path, root=root, check_images=False))
    assert isinstance(found[0], ManifestItem)
    assert ["path escapes --root" in _bad(entry) for entry in found[1:4]] == [True] * 3
    assert "NUL byte" in _bad(found[4])
    unconfined = list(read_manifest(path, check_images=False))  # the user's own file
    assert [isinstance(entry, ManifestItem) for entry in unconfined] == [True] * 2 + [False] + [
        True,
        False,
    ]
    assert "duplicate id" in _bad(unconfined[2])  # the same file, as an absolute path


def test_a_manifest_csv_names_the_line_of_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    _image(tmp_path / "a.png")
    path = tmp_path / "m.csv"
    path.write_bytes(b"image,mos\na.png,3\nb\xff.png,3\na.png,4\n")
    found = _by_line(list(read_manifest(path, check_images=False)))
    assert isinstance(found[2], ManifestItem)
    assert _bad(found[3]) == "line 3 is not UTF-8 text (byte 0xff)"
    assert "duplicate id" in _bad(found[4])  # read, and checked like any row


def test_a_jsonl_line_nested_200000_deep_is_one_bad_row(tmp_path: Path) -> None:
    _image(tmp_path / "a.png")
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"image": "a.png"}\n' + '{"image": ' + DEEP + "}\n" + '{"image": "a.png", "id": "two"}\n'
    )
    found = _by_line(list(read_manifest(path, check_images=False)))
    assert "nested deeper than 64 levels" in _bad(found[2])
    assert isinstance(found[1], ManifestItem) and isinstance(found[3], ManifestItem)


def test_a_json_manifest_nested_too_deep_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(DEEP)
    with pytest.raises(ManifestFormatError, match="nested deeper than"):
        list(read_manifest(path))


def test_a_jsonl_line_too_long_is_skipped_without_holding_it(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"image": "' + "x" * 3_000_000 + '"}\n{"image": "a.png"}\n')
    _image(tmp_path / "a.png")
    found = _by_line(list(read_manifest(path, check_images=False)))
    assert "longer than" in _bad(found[1]) and isinstance(found[2], ManifestItem)


# -- bombs ----------------------------------------------------------------------------------------


def _xlsx_with(path: Path, extra: dict[str, bytes], entries: int = 0) -> None:
    """A valid SPAQ sheet, rewritten with ``extra`` entries (replacing any of that name)."""
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
            if item.filename not in extra:
                target.writestr(item, source.read(item))
        for name, data in extra.items():
            target.writestr(name, data)
        for index in range(entries):
            target.writestr(f"junk/{index}", b"")


SPAQ_FILE = "Annotations/MOS and Image attribute scores.xlsx"


@pytest.mark.parametrize(
    ("extra", "entries", "message"),
    [
        (
            {"xl/sharedStrings.xml": b"<si><t>a</t></si>" * 1_200_000},
            0,
            "sharedStrings.xml unpacks to 19 MB, more than 16",
        ),
        ({"xl/worksheets/sheet1.xml": b" " * (65 * 2**20)}, 0, "unpacks to 65 MB"),
        ({}, 1500, "holds 15"),
    ],
)
def test_an_xlsx_bomb_is_refused_in_one_line_before_parsing(
    extra: dict[str, bytes], entries: int, message: str, tmp_path: Path
) -> None:
    _xlsx_with(tmp_path / SPAQ_FILE, extra, entries)
    started = time.monotonic()
    with pytest.raises(DatasetFormatError, match=message) as caught:
        get_dataset("spaq").rows(tmp_path)
    assert time.monotonic() - started < 5 and "\n" not in str(caught.value)


def test_spaq_streams_rows_so_limit_stops_the_reading(tmp_path: Path, monkeypatch) -> None:
    _spaq(tmp_path, [f"{index:05d}.jpg" for index in range(50)])
    import openpyxl.worksheet._read_only as read_only

    seen = []
    original = read_only.ReadOnlyWorksheet._cells_by_row

    def counted(self, *args, **kwargs):
        for row in original(self, *args, **kwargs):
            seen.append(row)
            yield row

    monkeypatch.setattr(read_only.ReadOnlyWorksheet, "_cells_by_row", counted)
    _, entries = dataset_entries("spaq", tmp_path, check_images=False, limit=3)
    assert len(list(entries)) == 3
    assert len(seen) < 10


def _mat(path: Path, rows: int, cols: int, data: bytes) -> None:
    """A MAT v5 file holding one compressed double array that declares ``rows`` x ``cols``."""
    name = b"AllMOS_release"
    body = (
        struct.pack("<II", 6, 8)
        + struct.pack("<II", 6, 0)
        + struct.pack("<II", 5, 8)
        + struct.pack("<ii", rows, cols)
        + struct.pack("<II", 1, len(name))
        + name
        + b"\0" * (-len(name) % 8)
        + struct.pack("<II", 9, len(data))
        + data
    )
    packed = zlib.compress(struct.pack("<II", 14, len(body)) + body, 9)
    header = b"MATLAB 5.0 MAT-file, hostile".ljust(116) + b"\0" * 8 + struct.pack("<H", 0x0100)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + b"IM" + struct.pack("<II", 15, len(packed)) + packed)


@pytest.mark.parametrize(
    ("rows", "cols", "size", "message"),
    [
        (1, 1, 0, "declares"),  # 4 GB declared below (1 x 2**29 doubles)
        (1, 1, 40 * 2**20, "inflates to more than"),  # 1 double declared, 40 MB inflated
    ],
)
def test_a_mat_bomb_is_refused_before_scipy_loads_it(
    rows: int, cols: int, size: int, message: str, tmp_path: Path
) -> None:
    from agentic_iqa.datasets.bounded import check_mat

    if message == "declares":
        rows, cols = 1, 2**29
    _livec(tmp_path, [])
    path = tmp_path / "Data" / "AllMOS_release.mat"
    _mat(path, rows, cols, b"\0" * size)
    started = time.monotonic()
    with pytest.raises(ValueError, match=message):
        check_mat(path)
    with pytest.raises(DatasetFormatError, match=message) as caught:
        get_dataset("livec").rows(tmp_path)
    assert time.monotonic() - started < 5 and "\n" not in str(caught.value)


def test_the_real_mat_files_pass_the_budget(tmp_path: Path) -> None:
    from agentic_iqa.datasets.bounded import check_mat

    _livec(tmp_path, ["1000.JPG"])
    check_mat(tmp_path / "Data" / "AllImages_release.mat")
    check_mat(tmp_path / "Data" / "AllMOS_release.mat")


# -- the one function -----------------------------------------------------------------------------


def test_confined_key_is_the_lexical_rule_an_object_store_can_reuse() -> None:
    from agentic_iqa.jobs.paths import PathRejected, confined_key

    assert confined_key("a/./b/../c.jpg", "bucket/prefix") == "a/c.jpg"
    assert confined_key("../prefix/c.jpg", "bucket/prefix") == "c.jpg"
    for hostile in ("../other/c.jpg", "/etc/passwd", "a\x00b", "..\\..\\x"):
        with pytest.raises(PathRejected):
            confined_key(hostile, "bucket/prefix")


def test_locate_follows_symlinks_inside_the_root(tmp_path: Path) -> None:
    from agentic_iqa.jobs.paths import PathRejected, Root, locate

    image = _image(tmp_path / "root" / "a.png")
    (tmp_path / "root" / "b.png").symlink_to(image)
    assert locate("b.png", Root.of(tmp_path / "root", tmp_path / "root")) == image.resolve()
    with pytest.raises(PathRejected, match="not a file"):
        locate(".", Root.of(tmp_path / "root", tmp_path / "root"))


# -- through the command line ---------------------------------------------------------------------


@pytest.fixture()
def database(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)


def test_submit_of_a_hostile_dataset_scores_nothing_outside_and_says_why(
    places: dict[str, Path], database: None
) -> None:
    root, secret = places["root"], places["secret"]
    _koniq(root, ["../../outside/secret.png", "../" * 12 + "etc/shadow", "a\x00b.png"])
    result = runner.invoke(
        app,
        [
            "eval",
            "submit",
            "--dataset",
            "koniq",
            "--root",
            str(root),
            "--mode",
            "tools",
            "--tools",
            "PIQE",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "path escapes --root" in result.output and "Traceback" not in result.output
    assert str(secret) not in result.output


def test_submit_of_an_xlsx_bomb_is_one_line(tmp_path: Path, database: None) -> None:
    _xlsx_with(tmp_path / SPAQ_FILE, {"xl/sharedStrings.xml": b"<si><t>a</t></si>" * 1_200_000})
    result = runner.invoke(
        app,
        [
            "eval",
            "submit",
            "--dataset",
            "spaq",
            "--root",
            str(tmp_path),
            "--mode",
            "tools",
            "--tools",
            "PIQE",
        ],
    )
    assert result.exit_code == 1 and "unpacks to" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_submit_of_a_manifest_with_nul_deep_and_bad_bytes_runs_the_rest(
    tmp_path: Path, database: None
) -> None:
    _image(tmp_path / "a.png")
    path = tmp_path / "m.jsonl"
    path.write_bytes(
        b'{"image": "a\\u0000b.png"}\n{"image": '
        + DEEP.encode()
        + b"}\n"
        + b'{"image": "\xff.png"}\n'
    )
    result = runner.invoke(app, ["eval", "submit", str(path), "--mode", "tools", "--tools", "PIQE"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "3 items (3 bad rows" in result.output  # the usual summary, one reason
    assert "contains a NUL byte" in result.output


def test_line_by_line_decoding_still_reads_carriage_return_line_ends(tmp_path: Path) -> None:
    """Older spreadsheet programs on the Mac end CSV lines with a lone carriage return."""
    _image(tmp_path / "a.png")
    _image(tmp_path / "b.png")
    path = tmp_path / "m.csv"
    path.write_bytes(b'image,mos\ra.png,3\r"b.png",4\r')
    assert [type(entry) for entry in read_manifest(path)] == [ManifestItem, ManifestItem]


def test_a_mos_off_a_datasets_scale_names_that_scale_not_an_option(places: dict[str, Path]) -> None:
    """KonIQ's MOS is on 1-5: a 9.5 is a bad row that says so, without citing --mos-range,
    which the user never gave."""
    root = places["root"]
    folder = _koniq(root, ["good.png"])
    path = root / "koniq10k_scores_and_distributions.csv"
    path.write_text(path.read_text().replace(",3.5,", ",9.5,"))
    _image(root / folder / "good.png")
    message = _bad(_dataset("koniq10k", root, [])[1])
    assert "9.5" in message and "koniq10k's published scale" in message, message
    assert "--mos-range" not in message
