"""Public datasets read from a bucket (`eval submit --dataset NAME --root s3://bucket/prefix`)
on a local S3 server (moto): the reader finds its files and image folders under the prefix,
the items are the objects' URLs, confined to it, and score as the same dataset in a folder."""

from __future__ import annotations

import csv
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agentic_iqa.jobs.spec import JobSpec
from tests.conftest import example_photo

# Left out of the README's test command (CI runs it): datasets read from an object store server.
pytestmark = pytest.mark.slow

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")


@pytest.fixture
def bucket(object_store: str) -> Iterator[str]:
    """An empty bucket, credentials and endpoint in the environment only; this process's
    object cache empty, in the test's folder."""
    name = f"datasets-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=object_store).create_bucket(Bucket=name)
    yield name


def _upload(folder: Path, moto_url: str, bucket: str, prefix: str) -> str:
    """Every file under ``folder`` as an object under ``prefix``; the prefix's URL."""
    client = boto3.client("s3", endpoint_url=moto_url)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(folder).as_posix()}"
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    return f"s3://{bucket}/{prefix}"


def _livec_photos(livec_dir: Path, count: int) -> list[tuple[str, float]]:
    """The first ``count`` real LIVE-C photos of the shared data, with their MOS."""
    with (livec_dir / "mos.csv").open() as handle:
        return [(row["image"], float(row["mos"])) for row in csv.DictReader(handle)][:count]


def _koniq(folder: Path, livec_dir: Path) -> Path:
    """KonIQ-10k as it unpacks, with the half-size image folder (``512x384/``: the second one
    the reader looks for) holding real photos, and one record that climbs out of the root."""
    rows = []
    for index, (name, mos) in enumerate(_livec_photos(livec_dir, 3)):
        target = folder / "512x384" / f"{name.lower()}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(livec_dir / "images" / name, target)
        rows.append(f"{target.name},{1 + 4 * mos / 100:.6f},{0.5 + index / 10},{mos}\n")
    rows.append("../../other/x.jpg,3.0,0.5,50\n")
    (folder / "koniq10k_scores_and_distributions.csv").write_text(
        "image_name,MOS,SD,MOS_zscore\n" + "".join(rows)
    )
    return folder


def _livec(folder: Path, livec_dir: Path) -> Path:
    """LIVE-C as it unpacks: its two MAT files (the 7 training images first) and ``Images/``
    with real photos."""
    from scipy.io import savemat

    photos = [(f"t{n}.bmp", 50.0 + n) for n in range(1, 8)] + _livec_photos(livec_dir, 3)
    (folder / "Data").mkdir(parents=True)
    cells = np.empty((len(photos), 1), dtype=object)
    for index, (name, _) in enumerate(photos):
        cells[index, 0] = np.array([name])
    savemat(folder / "Data" / "AllImages_release.mat", {"AllImages_release": cells})
    savemat(
        folder / "Data" / "AllMOS_release.mat",
        {"AllMOS_release": np.array([[mos for _, mos in photos]])},
    )
    (folder / "Images").mkdir()
    for name, _ in photos[7:]:
        shutil.copyfile(livec_dir / "images" / name, folder / "Images" / name)
    return folder


def _items(engine, job_id: str) -> dict[str, dict]:
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.exports import export_rows

    with read_scope(engine) as session:
        return {row["item_id"]: row for row in export_rows(session, job_id)}


def _described(engine, job_id: str) -> dict:
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.jobs import get_job

    with read_scope(engine) as session:
        return json.loads(get_job(session, job_id).dataset_json)


def _remote_and_local(engine, dataset: str, url: str, folder: Path) -> tuple[dict, dict]:
    """The dataset submitted from the bucket and from the folder, both run with PIQE."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    remote = submit(engine, JobSpec.build(dataset=dataset, root=url, tools=["PIQE"]))
    local = submit(engine, JobSpec.build(dataset=dataset, root=folder, tools=["PIQE"]))
    for job in (remote, local):
        run_local(engine, job, AgentsCache(), workers=1)
    assert _described(engine, remote)["root"] == url
    assert _described(engine, local)["root"] == str(folder.resolve())
    return _items(engine, remote), _items(engine, local)


def test_koniq_in_a_bucket_scores_as_from_a_folder_and_keeps_its_names_in_the_prefix(
    engine, bucket: str, moto_url: str, tmp_path: Path, livec_dir: Path
) -> None:
    folder = _koniq(tmp_path / "koniq", livec_dir)
    url = _upload(folder, moto_url, bucket, "datasets/koniq")
    client = boto3.client("s3", endpoint_url=moto_url)  # what the escaping name points at
    client.put_object(
        Bucket=bucket, Key="other/x.jpg", Body=(folder / "512x384" / "1001.jpg").read_bytes()
    )
    on_store, on_disk = _remote_and_local(engine, "koniq10k", url, folder)
    photos = [name.lower() for name, _ in _livec_photos(livec_dir, 3)]
    assert set(on_store) == set(on_disk) and set(photos) <= set(on_store)
    for name in photos:
        item = on_store[name]
        assert item["status"] == "done", item
        assert item["image"] == f"{url}/512x384/{name}"
        assert item["mos"] == on_disk[name]["mos"] and item["mos"] is not None
        assert item["raw_scores"] == on_disk[name]["raw_scores"]
        assert set(item["raw_scores"]) == {"PIQE"}
    escaped = [item for key, item in on_store.items() if key not in photos]
    assert len(escaped) == 1 and escaped[0]["status"] == "failed"
    assert escaped[0]["image"] is None
    error = escaped[0]["error"]
    assert "line 4" in error and "escapes --root" in error and url in error, error
    assert "climbs out" in error


def test_livec_in_a_bucket_reads_its_mat_files_from_the_store(
    engine, bucket: str, moto_url: str, tmp_path: Path, livec_dir: Path
) -> None:
    folder = _livec(tmp_path / "livec", livec_dir)
    url = _upload(folder, moto_url, bucket, "livec")
    on_store, on_disk = _remote_and_local(engine, "livec", url, folder)
    photos = _livec_photos(livec_dir, 3)
    assert sorted(on_store) == sorted(name for name, _ in photos) == sorted(on_disk)
    for name, mos in photos:
        item = on_store[name]
        assert item["status"] == "done", item
        assert item["image"] == f"{url}/Images/{name}"
        assert item["mos"] == pytest.approx(mos) and item["mos"] == on_disk[name]["mos"]
        assert item["raw_scores"] == on_disk[name]["raw_scores"]


def test_tid2013_in_a_bucket_finds_each_file_as_the_prefix_lists_it(
    engine, bucket: str, moto_url: str, tmp_path: Path
) -> None:
    """The score list says ``i01_01_1.bmp`` and ``i25_...``, the store holds other spellings:
    the listing of each image prefix gives the name that exists."""
    from agentic_iqa.runtime.submission import submit

    folder = tmp_path / "tid"
    for relative in (
        "distorted_images/I01_01_1.BMP",
        "distorted_images/i25_17_3.bmp",
        "reference_images/I01.BMP",
        "reference_images/i25.bmp",
    ):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        example_photo((64, 48)).save(folder / relative, format="BMP")
    (folder / "mos_with_names.txt").write_text("5.51429 i01_01_1.bmp\n4.25 I25_17_3.BMP\n")
    url = _upload(folder, moto_url, bucket, "tid2013")
    job = submit(engine, JobSpec.build(dataset="tid2013", root=url + "/"))
    items = _items(engine, job)
    assert {
        key: (item["status"], item["image"], item["reference"], item["mos"])
        for key, item in items.items()
    } == {
        "i01_01_1.bmp": (
            "pending",
            f"{url}/distorted_images/I01_01_1.BMP",
            f"{url}/reference_images/I01.BMP",
            5.51429,
        ),
        "I25_17_3.BMP": (
            "pending",
            f"{url}/distorted_images/i25_17_3.bmp",
            f"{url}/reference_images/i25.bmp",
            4.25,
        ),
    }


def _photo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    example_photo((64, 48)).save(path)


def _spaq(folder: Path) -> list[str]:
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.active.append(["Image name", "MOS", "Brightness"])
    for name, mos in (("00001.jpg", 48.86), ("00002.jpg", 62.5)):
        workbook.active.append([name, mos, 50])
        _photo(folder / "TestImage" / name)
    (folder / "Annotations").mkdir()
    workbook.save(folder / "Annotations" / "MOS and Image attribute scores.xlsx")
    return ["TestImage/00001.jpg", "TestImage/00002.jpg"]


def _qbench(folder: Path) -> list[str]:
    questions = [
        {
            "img_path": name,
            "question": "Is the image clear?",
            "candidates": ["Yes", "No"],
            "correct_ans": "No",
            "type": 0,
            "concern": 0,
        }
        for name in ("00079.jpg", "01001.jpg")
    ]
    for question in questions:
        _photo(folder / "images_llvisionqa" / question["img_path"])
    (folder / "llvisionqa_dev.json").write_text(json.dumps(questions))
    return ["images_llvisionqa/00079.jpg", "images_llvisionqa/01001.jpg"]


def _agiqa(folder: Path) -> list[str]:
    names = ("AttnGAN_normal_000.jpg", "midjourney_lowstep_001.jpg")
    for name in names:
        _photo(folder / "database" / name)
    (folder / "data.csv").write_text(
        "name,prompt,mos_quality,mos_align\n"
        + "".join(f"{name},a cat,{2 + index},3.1\n" for index, name in enumerate(names))
    )
    return [f"database/{name}" for name in names]


def _kadid(folder: Path) -> list[str]:
    for name in ("I01_01_01.png", "I01_01_05.png", "I01.png"):
        _photo(folder / "images" / name)
    (folder / "dmos.csv").write_text(
        "dist_img,ref_img,dmos,var\nI01_01_01.png,I01.png,4.57,0.1\nI01_01_05.png,I01.png,1.1,0.2\n"
    )
    return ["images/I01_01_01.png", "images/I01_01_05.png"]


@pytest.mark.parametrize(
    ("dataset", "layout"),
    [("spaq", _spaq), ("qbench", _qbench), ("agiqa3k", _agiqa), ("kadid10k", _kadid)],
)
def test_every_reader_takes_its_layout_from_a_bucket_as_from_a_folder(
    engine, bucket: str, moto_url: str, tmp_path: Path, dataset: str, layout
) -> None:
    """SPAQ's spreadsheet, Q-Bench's JSON, AGIQA-3K's CSV with its second image folder name,
    KADID-10k's references: the same items, named under the prefix."""
    from agentic_iqa.runtime.submission import submit

    folder = tmp_path / dataset
    folder.mkdir()
    images = layout(folder)
    url = _upload(folder, moto_url, bucket, f"public/{dataset}")
    remote = _items(engine, submit(engine, JobSpec.build(dataset=dataset, root=url)))
    local = _items(engine, submit(engine, JobSpec.build(dataset=dataset, root=folder)))
    assert [item["image"] for item in remote.values()] == [f"{url}/{name}" for name in images]
    assert [item["image"] for item in local.values()] == [
        str((folder / name).resolve()) for name in images
    ]
    assert all(item["status"] == "pending" for item in remote.values())
    for key, item in remote.items():
        assert (item["mos"], item["query"], item["reference"]) == (
            local[key]["mos"],
            local[key]["query"],
            local[key]["reference"] and f"{url}/images/I01.png",
        )


def test_a_prefix_without_the_score_file_is_refused_naming_the_url(
    engine, bucket: str, moto_url: str, tmp_path: Path, livec_dir: Path
) -> None:
    from agentic_iqa.jobs.manifest import ManifestFormatError
    from agentic_iqa.runtime.submission import submit

    folder = _koniq(tmp_path / "koniq", livec_dir)
    (folder / "koniq10k_scores_and_distributions.csv").unlink()
    url = _upload(folder, moto_url, bucket, "only-images")
    with pytest.raises(ManifestFormatError) as refused:
        submit(engine, JobSpec.build(dataset="koniq10k", root=url))
    message = str(refused.value)
    assert message.startswith(
        "KonIQ-10k: koniq10k_scores_and_distributions.csv or "
        f"koniq10k_distributions_sets.csv not found under {url};"
    )
    with pytest.raises(
        ManifestFormatError, match=f"--root s3://{bucket}/nothing-here holds no object"
    ):
        submit(engine, JobSpec.build(dataset="koniq10k", root=f"s3://{bucket}/nothing-here"))


def test_a_root_url_with_a_password_is_refused_without_showing_it(engine, bucket: str) -> None:
    from agentic_iqa.jobs.manifest import ManifestFormatError
    from agentic_iqa.runtime.submission import submit

    with pytest.raises(ManifestFormatError) as refused:
        submit(
            engine, JobSpec.build(dataset="livec", root=f"s3://user:hunter2-secret@{bucket}/livec")
        )
    message = str(refused.value)
    assert "hunter2-secret" not in message and f"s3://***@{bucket}/livec" in message
    assert "AWS_PROFILE" in message


def test_a_store_that_finds_no_credential_refuses_the_submit_in_one_line(
    engine, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentic_iqa.jobs.manifest import ManifestFormatError
    from agentic_iqa.runtime.submission import submit

    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ManifestFormatError) as refused:
        submit(engine, JobSpec.build(dataset="koniq10k", root=f"s3://{bucket}/koniq"))
    message = str(refused.value)
    assert message.startswith(
        f"--root s3://{bucket}/koniq: the dataset's files cannot be read (NoCredentialsError"
    )
    assert "AWS_PROFILE" in message and "\n" not in message


def test_the_cli_submits_a_dataset_in_a_bucket_and_says_what_is_missing(
    results: str, bucket: str, moto_url: str, tmp_path: Path, livec_dir: Path
) -> None:
    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    folder = _livec(tmp_path / "livec", livec_dir)
    url = _upload(folder, moto_url, bucket, "livec")
    runner = CliRunner()
    done = runner.invoke(
        app,
        ["eval", "submit", "--dataset", "livec", "--root", url, "--tools", "PIQE", "--limit", "1"],
    )
    assert done.exit_code == 0, done.output
    assert "1 items (0 bad rows" in done.output
    missing = runner.invoke(
        app, ["eval", "submit", "--dataset", "livec", "--root", f"{url}/Images", "--tools", "PIQE"]
    )
    assert missing.exit_code == 1
    assert f"Data/AllImages_release.mat not found under {url}/Images" in missing.output
