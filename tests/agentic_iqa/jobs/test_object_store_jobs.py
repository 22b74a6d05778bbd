"""Jobs whose images live in an object store (a local S3 server, moto), scored as the same
images on this disk are, each object fetched once per process, bad objects as bad rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_iqa.jobs.spec import JobSpec
from tests.conftest import REPO

# Left out of the README's test command (CI runs it): jobs whose images live in an object store
# server.
pytestmark = pytest.mark.slow

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

PHOTOS = ("i03_blurred.png", "i03_reference.png")


@pytest.fixture
def bucket(object_store: str) -> Iterator[str]:
    """A bucket holding the example photos under ``photos/``; this process's object cache
    empty, in the test's folder."""
    name = f"photos-{uuid.uuid4().hex[:10]}"
    client = boto3.client("s3", endpoint_url=object_store)
    client.create_bucket(Bucket=name)
    for photo in PHOTOS:
        client.put_object(
            Bucket=name, Key=f"photos/{photo}", Body=(REPO / "examples" / photo).read_bytes()
        )
    yield name


def _scores(engine, job_id: str) -> dict[str, tuple[str, dict, str | None]]:
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.exports import export_rows

    with read_scope(engine) as session:
        return {
            row["item_id"]: (row["status"], row["raw_scores"], row["error"])
            for row in export_rows(session, job_id)
        }


def test_a_metric_job_on_objects_scores_as_on_local_files_and_fetches_each_once(
    engine, bucket: str, tmp_path: Path
) -> None:
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit
    from iqa_tools import images

    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "id,image\n"
        + "".join(f"{p},{p}\n" for p in PHOTOS)
        + "gone,missing.png\nout,../elsewhere/i03_blurred.png\n"
    )
    remote = submit(
        engine, JobSpec.build(manifest=manifest, tools=["PIQE"], image_dir=f"s3://{bucket}/photos")
    )
    run_local(engine, remote, AgentsCache(), workers=1)
    local = submit(
        engine, JobSpec.build(manifest=manifest, tools=["PIQE"], image_dir=REPO / "examples")
    )
    run_local(engine, local, AgentsCache(), workers=1)
    on_store, on_disk = _scores(engine, remote), _scores(engine, local)
    for photo in PHOTOS:
        assert on_store[photo][0] == "done", on_store[photo]
        assert on_store[photo][1] == on_disk[photo][1]  # the same scores, to the last digit
        assert set(on_store[photo][1]) == {"PIQE"}
    errors = sorted(error or "" for status, _, error in on_store.values() if status == "failed")
    assert len(errors) == 2
    assert "(id 'gone')" in errors[0] and "not found" in errors[0]
    assert f"s3://{bucket}/photos/missing.png" in errors[0]
    assert "(id 'out')" in errors[1] and "escapes" in errors[1]
    cache = images.object_cache()
    assert cache.misses == len(PHOTOS)  # each object downloaded once, then read from disk
    assert cache.hits >= len(PHOTOS)


def test_an_agent_job_on_objects_answers_as_on_local_files(
    engine, bucket: str, tmp_path: Path
) -> None:
    """The builtin agent (plan, tools, summary): the same answer and score per item."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    manifest = tmp_path / "m.csv"
    manifest.write_text("image\n" + "".join(f"s3://{bucket}/photos/{p}\n" for p in PHOTOS))
    local_manifest = tmp_path / "local.csv"
    local_manifest.write_text("image\n" + "".join(f"{REPO / 'examples' / p}\n" for p in PHOTOS))
    remote = submit(engine, JobSpec.build(manifest=manifest, root=f"s3://{bucket}/photos"))
    local = submit(engine, JobSpec.build(manifest=local_manifest))
    for job in (remote, local):
        run_local(engine, job, AgentsCache(), workers=1)
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.exports import export_rows

    with read_scope(engine) as session:
        answers = {
            job: [
                (row["status"], row["final_answer"], row["quality_score"])
                for row in export_rows(session, job)
            ]
            for job in (remote, local)
        }
    assert answers[remote] == answers[local]
    assert all(status == "done" for status, _, _ in answers[remote])


def test_a_bucket_root_confines_full_urls_to_its_prefix(
    engine, bucket: str, tmp_path: Path
) -> None:
    from sqlalchemy import text

    from agentic_iqa.runtime.submission import submit

    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "id,image\n"
        f"in,s3://{bucket}/photos/i03_blurred.png\n"
        f"other,s3://another-bucket/photos/i03_blurred.png\n"
        f"climb,s3://{bucket}/photos/../secret/x.png\n"
        f"local,{REPO / 'examples' / 'i03_blurred.png'}\n"
    )
    job = submit(engine, JobSpec.build(manifest=manifest, root=f"s3://{bucket}/photos"))
    with engine.connect() as connection:
        rows = {
            line: (status, error)
            for line, status, error in connection.execute(
                text("SELECT line, status, error FROM job_items WHERE job_id = :job"), {"job": job}
            )
        }
    assert rows[2][0] != "failed"
    for line in (3, 4, 5):
        assert rows[line][0] == "failed" and "escapes" in (rows[line][1] or ""), rows[line]


def test_a_resume_fails_the_item_whose_object_changed_since_submit(
    engine, bucket: str, moto_url: str, tmp_path: Path
) -> None:
    from sqlalchemy import text

    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.lifecycle import resume
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    manifest = tmp_path / "m.csv"
    manifest.write_text("id,image\n" + "".join(f"{p},{p}\n" for p in PHOTOS))
    job = submit(
        engine, JobSpec.build(manifest=manifest, tools=["PIQE"], image_dir=f"s3://{bucket}/photos")
    )
    with engine.connect() as connection:
        digests = {
            key: digest
            for key, digest in connection.execute(
                text("SELECT item_key, image_digest FROM job_items WHERE job_id = :job"),
                {"job": job},
            )
        }
    assert all(digest and digest.startswith("etag:") for digest in digests.values())
    boto3.client("s3", endpoint_url=moto_url).put_object(  # replaced before the job ran
        Bucket=bucket, Key=f"photos/{PHOTOS[0]}", Body=(REPO / "examples" / PHOTOS[1]).read_bytes()
    )
    resume(engine, job)
    run_local(engine, job, AgentsCache(), workers=1)
    rows = _scores(engine, job)
    assert rows[PHOTOS[1]][0] == "done"
    status, _, error = rows[PHOTOS[0]]
    assert status == "failed" and "changed since the job was submitted" in (error or "")
    assert digests[PHOTOS[0]] in (error or "")


def test_assess_takes_an_objects_url_and_answers_as_for_the_file(bucket: str) -> None:
    import json

    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    runner = CliRunner()
    remote = runner.invoke(app, ["assess", f"s3://{bucket}/photos/{PHOTOS[0]}", "--json"])
    local = runner.invoke(app, ["assess", str(REPO / "examples" / PHOTOS[0]), "--json"])
    assert remote.exit_code == 0 and local.exit_code == 0, remote.output
    answer = json.loads(remote.stdout)["summarizer_result"]
    assert answer == json.loads(local.stdout)["summarizer_result"]
    missing = runner.invoke(app, ["assess", f"s3://{bucket}/photos/nothing.png"])
    assert missing.exit_code == 1
    assert len(missing.output.strip().splitlines()) == 1 and "not found" in missing.output


def test_a_store_refusing_the_workers_credential_stops_the_job_with_one_message(
    engine, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submitted while the store let us in; by the time the items run it answers 403
    AccessDenied to everything (a rotated key): the job stops once, it does not fail item by
    item."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit
    from iqa_tools import images, storage

    class Denied(BaseHTTPRequestHandler):
        def _deny(self) -> None:
            body = (
                b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                b"<Message>Access Denied</Message></Error>"
            )
            self.send_response(403)
            self.send_header("content-type", "application/xml")
            self.send_header("content-length", str(len(body) if self.command != "HEAD" else 0))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _deny  # noqa: N815

        def log_message(self, *_: object) -> None:
            """Quiet."""

    manifest = tmp_path / "m.csv"
    manifest.write_text("id,image\n" + "".join(f"{p},{p}\n" for p in PHOTOS))
    job = submit(
        engine, JobSpec.build(manifest=manifest, tools=["PIQE"], image_dir=f"s3://{bucket}/photos")
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), Denied)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("AGENTIC_IQA_OBJECT_CACHE", str(tmp_path / "worker-objects"))
        monkeypatch.setattr(images, "_OBJECT_CACHE", [])
        storage.forget_filesystems()  # as a worker process would start: nothing seen yet
        run_local(engine, job, AgentsCache(), workers=1)
    finally:
        server.shutdown()
    current = progress(engine, job)
    assert current.status == "cancelled"
    assert current.error is not None and current.error.startswith("stopped:")
    assert "image store's credential" in current.error and "\n" not in current.error
    assert current.counts.get("done", 0) == 0 and current.counts.get("failed", 0) <= 1
