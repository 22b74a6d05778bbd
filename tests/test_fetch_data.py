"""scripts/fetch_data.py, offline: the repository's test data is what was recorded; a release of
LIVE-C (a small one, built here from the repository's photos as the real one is laid out) becomes
livec-extra and, with --full, an unpacked release; the checks name what is wrong; without the
release, or given a web page for it, the command says where to get it.  The real download is
not exercised (no internet here)."""

from __future__ import annotations

import copy
import csv
import importlib.util
import io
import os
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import REPO, REPOSITORY_DATA

_spec = importlib.util.spec_from_file_location("fetch_data", REPO / "scripts" / "fetch_data.py")
assert _spec is not None and _spec.loader is not None
fetch_data = importlib.util.module_from_spec(_spec)
sys.modules["fetch_data"] = fetch_data
_spec.loader.exec_module(fetch_data)

runner = CliRunner()
IN_REPOSITORY = 20  # livec-extra photos in tests/data


_load_checksums = fetch_data.load_checksums


def _recorded() -> dict[str, Any]:
    return _load_checksums()


def _as_in_the_repository() -> dict[str, Any]:
    """The recorded checksums with livec-extra cut to the photos the repository holds: what a
    release built from them must give."""
    checksums = copy.deepcopy(_recorded())
    extra = checksums["sets"]["livec-extra"]
    extra["rows"] = extra["rows"][:IN_REPOSITORY]
    extra["count"] = IN_REPOSITORY
    return checksums


def _release(
    folder: Path,
    mos_change: dict[str, float] | None = None,
    extra_members: dict[str, bytes] | None = None,
) -> Path:
    """``ChallengeDB_release.zip`` as LIVE-C lays it out (Data/*.mat: the 7 training images
    first, then the photos; Images/ with BMPs and JPEGs; Images/trainingImages/), holding the
    repository's 20 livec-extra photos as BMP and two livec-dev JPEGs."""
    from scipy.io import savemat

    extra = _recorded()["sets"]["livec-extra"]["rows"][:IN_REPOSITORY]
    dev = _recorded()["sets"]["livec-dev"]["rows"][:2]
    entries = [(f"t{n}.bmp", 50.0 + n, 10.0) for n in range(1, 8)]
    entries += [(f"{Path(image).stem}.bmp", float(mos), float(std)) for image, mos, std in extra]
    entries += [(image, float(mos), float(std)) for image, mos, std in dev]
    entries = [(name, (mos_change or {}).get(name, mos), std) for name, mos, std in entries]
    cells = np.empty((len(entries), 1), dtype=object)
    for index, (name, _, _) in enumerate(entries):
        cells[index, 0] = np.array([name])
    tables = {}
    for file, key, values in (
        ("AllImages_release.mat", "AllImages_release", cells),
        ("AllMOS_release.mat", "AllMOS_release", np.array([[e[1] for e in entries]])),
        ("AllStdDev_release.mat", "AllStdDev_release", np.array([[e[2] for e in entries]])),
    ):
        buffer = io.BytesIO()
        savemat(buffer, {key: values})
        tables[f"Data/{file}"] = buffer.getvalue()
    archive = folder / "ChallengeDB_release.zip"
    with zipfile.ZipFile(archive, "w") as release:
        release.writestr(
            "ChallengeDB_release/readme.txt",
            "LIVE In the Wild Image Quality Challenge Database (test copy)\n",
        )
        for name, data in tables.items():
            release.writestr(f"ChallengeDB_release/{name}", data)
        for n in range(1, 8):
            bitmap = io.BytesIO()
            Image.new("RGB", (50, 40), (n * 30, 90, 120)).save(bitmap, "BMP")
            release.writestr(
                f"ChallengeDB_release/Images/trainingImages/t{n}.bmp", bitmap.getvalue()
            )
        for image, _, _ in extra:
            bitmap = io.BytesIO()
            Image.open(REPOSITORY_DATA / "livec-extra" / "images" / image).save(bitmap, "BMP")
            release.writestr(
                f"ChallengeDB_release/Images/{Path(image).stem}.bmp", bitmap.getvalue()
            )
        for image, _, _ in dev:
            release.write(
                REPOSITORY_DATA / "livec-dev" / "images" / image,
                f"ChallengeDB_release/Images/{image}",
            )
        for name, data in (extra_members or {}).items():
            release.writestr(name, data)
    return archive


# -- the data in the repository ------------------------------------------------------------------


ROOTS = [("repository", REPOSITORY_DATA, True)]
if os.environ.get("AGENTIC_IQA_DATA_DIR"):
    ROOTS.append(("AGENTIC_IQA_DATA_DIR", Path(os.environ["AGENTIC_IQA_DATA_DIR"]), False))


@pytest.mark.parametrize(("root", "partial"), [r[1:] for r in ROOTS], ids=[r[0] for r in ROOTS])
def test_the_test_data_is_what_was_recorded(root: Path, partial: bool) -> None:
    """Every file of tests/data (and of the folder AGENTIC_IQA_DATA_DIR names, complete) is the
    recorded one; the repository holds all of three sets and 20 of the 200 livec-extra photos."""
    result = fetch_data.check(root, partial=partial)
    assert result.problems == [] and result.notes == []
    assert result.counts == {
        "livec-dev": "250 of 250 photos",
        "livec-extra": f"{IN_REPOSITORY if partial else 200} of 200 photos",
        "pyiqa-weights": "2 of 2 files",
        "tid2013-calibration": "12 of 12 files",
    }
    for name in ("livec-dev", "livec-extra", "tid2013-calibration", "pyiqa-weights"):
        assert (REPOSITORY_DATA / name / "NOTICE.txt").is_file(), name


def test_check_names_a_changed_missing_or_unlisted_file_and_accepts_a_reencoded_png(
    tmp_path: Path,
) -> None:
    root = shutil.copytree(REPOSITORY_DATA, tmp_path / "data")
    weights = root / "pyiqa-weights" / "niqe_modelparameters.mat"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    (root / "livec-dev" / "images" / "1001.JPG").unlink()
    shutil.copyfile(
        root / "livec-extra" / "images" / "3.png", root / "livec-extra" / "images" / "stray.png"
    )
    photo = root / "livec-extra" / "images" / "12.png"
    Image.open(photo).save(photo, "PNG", compress_level=1)  # other bytes, same pixels
    result = fetch_data.check(root, partial=True)
    assert sorted(result.problems) == sorted(
        [
            "pyiqa-weights/niqe_modelparameters.mat: changed (SHA-256 differs)",
            "livec-dev/images/1001.JPG: missing",
            "livec-extra/images: 1 files mos.csv does not list, e.g. stray.png",
        ]
    )
    assert result.notes == [
        "livec-extra: 1 PNGs are encoded differently from the recorded ones, with the same pixels"
    ]
    assert not fetch_data.check(root, partial=False).ok  # 20 of 200 is not complete


def test_check_names_a_changed_score(tmp_path: Path) -> None:
    root = shutil.copytree(REPOSITORY_DATA, tmp_path / "data")
    scores = root / "livec-extra" / "mos.csv"
    scores.write_bytes(scores.read_bytes().replace(b"12.png,15.8952,", b"12.png,15.8953,"))
    (problem,) = fetch_data.check(root, partial=True).problems
    assert problem == (
        "livec-extra/mos.csv: row 3 is ['12.png', '15.8953', '15.2557'], recorded "
        "['12.png', '15.8952', '15.2557']"
    )


# -- laying out livec-extra from the release -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("form", ["zip", "folder"])
def test_livec_extra_is_laid_out_from_the_release(tmp_path: Path, form: str) -> None:
    """The release's BMPs become the recorded PNGs' pixels, its MAT files the recorded
    mos.csv, byte for byte; from the zip or the folder it unpacks to."""
    source = _release(tmp_path)
    if form == "folder":
        with zipfile.ZipFile(source) as archive:
            archive.extractall(tmp_path / "unpacked")
        source = tmp_path / "unpacked"
    with fetch_data.Release(source) as release:
        written = fetch_data.lay_out_livec_extra(
            release, tmp_path / "out", _as_in_the_repository()["sets"]["livec-extra"]
        )
    assert written == IN_REPOSITORY
    made = tmp_path / "out" / "livec-extra"
    assert (made / "mos.csv").read_bytes() == (
        REPOSITORY_DATA / "livec-extra" / "mos.csv"
    ).read_bytes()
    assert (made / "NOTICE.txt").read_bytes() == (
        REPOSITORY_DATA / "livec-extra" / "NOTICE.txt"
    ).read_bytes()
    for image in (REPOSITORY_DATA / "livec-extra" / "images").iterdir():
        assert np.array_equal(
            np.asarray(Image.open(made / "images" / image.name)), np.asarray(Image.open(image))
        ), image.name
    shutil.copytree(
        REPOSITORY_DATA,
        tmp_path / "out",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("livec-extra"),
    )
    assert fetch_data.check(tmp_path / "out", _as_in_the_repository()).problems == []


def test_a_release_whose_scores_differ_from_the_recorded_ones_is_refused(tmp_path: Path) -> None:
    archive = _release(tmp_path, mos_change={"12.bmp": 16.5})
    with fetch_data.Release(archive) as release, pytest.raises(fetch_data.DataError) as error:
        fetch_data.lay_out_livec_extra(
            release, tmp_path / "out", _as_in_the_repository()["sets"]["livec-extra"]
        )
    assert "differ from those the tests were written on for 1 photos" in str(error.value)
    assert "12.bmp: MOS 16.5000" in str(error.value)
    assert not (tmp_path / "out" / "livec-extra" / "mos.csv").exists()


def test_a_zip_that_is_not_the_release_is_named(tmp_path: Path) -> None:
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("photos/1.jpg", b"")
    with pytest.raises(fetch_data.DataError, match="is not LIVE-C's release"):
        fetch_data.Release(other)


def test_unpacking_refuses_a_member_that_would_land_outside_the_folder(tmp_path: Path) -> None:
    archive = _release(tmp_path, extra_members={"ChallengeDB_release/../../evil.txt": b"x"})
    with (
        fetch_data.Release(archive) as release,
        pytest.raises(fetch_data.DataError, match="would land outside"),
    ):
        release.extract(tmp_path / "deep" / "unpacked")
    assert not (tmp_path / "evil.txt").exists()


# -- the command -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_command_makes_a_checked_folder_and_prints_the_export_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --full: the repository's sets copied, livec-extra made, the release unpacked, all
    checked (against checksums cut to what this small release holds)."""
    archive = _release(tmp_path)
    monkeypatch.setattr(fetch_data, "load_checksums", _as_in_the_repository)
    target = tmp_path / "iqa data"
    result = runner.invoke(
        fetch_data.app, ["--into", str(target), "--archive", str(archive), "--full"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith(f"export AGENTIC_IQA_DATA_DIR={target.resolve()}")
    assert f"livec-extra: {IN_REPOSITORY} photos from {archive}" in result.output
    assert "ChallengeDB_release: 29 images with MOS" in result.output
    assert "PROBLEM" not in result.output
    assert (target / "ChallengeDB_release" / "Images" / "trainingImages" / "t7.bmp").is_file()
    assert (target / "ChallengeDB_release" / "Data" / "AllMOS_release.mat").is_file()
    for name in ("livec-dev", "tid2013-calibration", "pyiqa-weights"):
        assert (target / name / "NOTICE.txt").is_file()
    with (target / "livec-dev" / "mos.csv").open(newline="", encoding="utf-8") as handle:
        assert len(list(csv.DictReader(handle))) == 250
    again = runner.invoke(fetch_data.app, ["--check", str(target)])
    assert again.exit_code == 0 and "livec-extra: 20 of 20 photos" in again.output


def test_check_of_the_repository_folder_allows_its_part_of_livec_extra() -> None:
    result = runner.invoke(fetch_data.app, ["--check", str(REPOSITORY_DATA)])
    assert result.exit_code == 0, result.output
    assert "(the repository part)" in result.output and "livec-extra: 20 of 200" in result.output


def test_check_of_an_incomplete_folder_fails_with_what_is_missing(tmp_path: Path) -> None:
    shutil.copytree(REPOSITORY_DATA / "pyiqa-weights", tmp_path / "pyiqa-weights")
    result = runner.invoke(fetch_data.app, ["--check", str(tmp_path)])
    assert result.exit_code == 1
    assert "PROBLEM: livec-dev/ is missing" in result.output
    assert "pyiqa-weights: 2 of 2 files" in result.output


def test_without_a_release_the_command_says_where_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    result = runner.invoke(fetch_data.app, [])
    assert result.exit_code == 1
    assert f"data folder: {tmp_path / 'cache' / 'agentic-iqa' / 'data'}" in result.output
    assert fetch_data.LIVEC_PAGE in result.output and "--archive" in result.output
    assert not (tmp_path / "cache").exists()  # nothing made before there is a release


def test_a_web_page_instead_of_the_zip_says_to_download_it_by_hand(tmp_path: Path) -> None:
    page = tmp_path / "ChallengeDB_release.zip"
    page.write_text("<!DOCTYPE html>\n<html><body>Sign in to download</body></html>\n")
    given = runner.invoke(fetch_data.app, ["--into", str(tmp_path / "out"), "--archive", str(page)])
    assert given.exit_code == 1
    assert "it is a web page" in given.output and fetch_data.LIVEC_PAGE in given.output
    downloaded = runner.invoke(
        fetch_data.app, ["--into", str(tmp_path / "out"), "--url", page.as_uri()]
    )
    assert downloaded.exit_code == 1
    assert f"{page.as_uri()} did not give ChallengeDB_release.zip: it is a web page" in (
        downloaded.output
    )
    assert not list((tmp_path / "out").rglob("*.zip*"))


@pytest.mark.slow
def test_a_zip_downloaded_from_a_url_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _release(tmp_path)
    monkeypatch.setattr(fetch_data, "load_checksums", _as_in_the_repository)
    result = runner.invoke(
        fetch_data.app, ["--into", str(tmp_path / "out"), "--url", archive.as_uri()]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / ".downloads" / "ChallengeDB_release.zip").read_bytes() == (
        archive.read_bytes()
    )
