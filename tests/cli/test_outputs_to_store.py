"""Reports, exports and figures written where the user asks: a path, or a store's URL (moto's
local S3 server), so a submitter whose disk no worker sees can still put its results in a
bucket; nothing of the credential is shown."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.conftest import example_photo

# Left out of the README's test command (CI runs it): jobs, reports and figures
# written to an object store server.
pytestmark = pytest.mark.slow

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

SECRET = "dummy-secret-never-shown"
runner = CliRunner()


@pytest.fixture
def store(object_store: str, results: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty bucket; the endpoint and the credential in the environment only."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_ATTEMPTS", "2")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_BACKOFF", "0.01")
    bucket = f"results-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=object_store).create_bucket(Bucket=bucket)
    return bucket


def _objects(moto_url: str, bucket: str) -> dict[str, bytes]:
    client = boto3.client("s3", endpoint_url=moto_url)
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {
        entry["Key"]: client.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read()
        for entry in listed
    }


def _metric_job(folder: Path) -> str:
    """A PIQE job on three photos with a MOS each (so the report draws its scatter)."""
    folder.mkdir(exist_ok=True)
    lines = ["image,mos"]
    for index in range(3):
        example_photo((160 + 16 * index, 120)).save(folder / f"p{index}.png")
        lines.append(f"p{index}.png,{2.0 + index}")
    (folder / "manifest.csv").write_text("\n".join(lines) + "\n")
    submitted = runner.invoke(
        app, ["eval", "submit", str(folder / "manifest.csv"), "--tools", "PIQE"]
    )
    assert submitted.exit_code == 0, submitted.output
    return submitted.stdout.split()[0]


def test_export_report_figures_and_compare_land_in_the_bucket(
    store: str, moto_url: str, tmp_path: Path
):
    job = _metric_job(tmp_path / "photos")
    again = _metric_job(tmp_path / "photos")
    out = f"s3://{store}/paper"

    exported = runner.invoke(app, ["eval", "export", job, "-o", f"{out}/results.csv"])
    reported = runner.invoke(
        app,
        [
            "eval",
            "report",
            job,
            "--bootstrap",
            "0",
            "--html",
            f"{out}/report.html",
            "--figures",
            f"{out}/figures",
        ],
    )
    compared = runner.invoke(
        app, ["eval", "compare", job, again, "--bootstrap", "10", "--html", f"{out}/compare.html"]
    )

    for result in (exported, reported, compared):
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output and "dummy-key-id" not in result.output
    assert f"wrote 3 rows to {out}/results.csv" in exported.stderr
    assert f"wrote {out}/report.html" in reported.stderr
    assert f"wrote {out}/figures/scatter-tool-PIQE.svg" in reported.stderr
    objects = _objects(moto_url, store)
    assert set(objects) == {
        "paper/results.csv",
        "paper/report.html",
        "paper/compare.html",
        "paper/figures/scatter-tool-PIQE.svg",
        "paper/figures/scatter-tool-PIQE.pdf",
    }
    rows = list(csv.DictReader(io.StringIO(objects["paper/results.csv"].decode())))
    assert sorted(Path(row["image"]).name for row in rows) == ["p0.png", "p1.png", "p2.png"]
    assert all(row["status"] == "done" for row in rows)
    assert b"<svg" in objects["paper/report.html"] and job.encode() in objects["paper/report.html"]
    assert objects["paper/figures/scatter-tool-PIQE.pdf"].startswith(b"%PDF")
    assert not list(Path.cwd().glob("*.partial")) and not (tmp_path / "paper").exists()


def test_a_bucket_that_is_not_there_is_one_line_naming_the_url(store: str, tmp_path: Path):
    job = _metric_job(tmp_path / "photos")
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/results.csv"

    result = runner.invoke(app, ["eval", "export", job, "-o", missing])

    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot write {missing}")
    assert len(result.stderr.strip().splitlines()) == 1
    assert SECRET not in result.output
