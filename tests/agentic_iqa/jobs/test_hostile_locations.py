"""A downloaded manifest reaches only what the user named: real servers on loopback
count every request that reached them, so "refused" means "never asked".

Servers: moto's S3 behind a counting front (the store's endpoint, ``AWS_ENDPOINT_URL``), and
small HTTP sites that serve photos, redirect to another port, stall after their headers, and
lie about their size.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import select

from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.exports import export_rows
from agentic_iqa.db.models import JobItem
from agentic_iqa.jobs.spec import JobSpec
from tests.conftest import REPO
from tests.iqa_tools.storage.servers import PHOTO, Front, Site, front_handler, serve_site

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

OTHER_PHOTO = (REPO / "examples" / "i03_reference.png").read_bytes()
SECRET = b"the private object: never fetched"


@pytest.fixture
def site(fast_storage: None) -> Iterator[Site]:
    """Photos under /photos/ on a loopback port."""
    yield from serve_site(Site(files={"/photos/good.png": PHOTO, "/photos/other.png": OTHER_PHOTO}))


@pytest.fixture
def elsewhere() -> Iterator[Site]:
    """Another port: where redirects lead, and the admin page a row names."""
    yield from serve_site(Site(files={"/photos/good.png": PHOTO}))


@pytest.fixture
def fast_storage(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from iqa_tools import images, storage

    for name, value in (
        ("AGENTIC_IQA_STORAGE_ATTEMPTS", "2"),
        ("AGENTIC_IQA_STORAGE_BACKOFF", "0.01"),
        ("AGENTIC_IQA_STORAGE_BACKOFF_MAX", "0.05"),
        ("AGENTIC_IQA_OBJECT_CACHE", str(tmp_path / "objects")),
        ("AGENTIC_IQA_TOOL_CACHE", "memory"),
        ("AGENTIC_IQA_DEVICE", "cpu"),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AGENTIC_IQA_ALLOWED_LOCATIONS", raising=False)
    monkeypatch.setattr(images, "_OBJECT_CACHE", [])
    storage.forget_filesystems()


@pytest.fixture
def store(
    object_store: str, fast_storage: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Front, str, str]]:
    """moto behind a counting front, the front being the configured endpoint; a bucket of
    photos under ``set1/`` and another bucket holding a private object.  Yields the front and
    both buckets' names."""
    from iqa_tools import storage

    photos, private = f"photos-{uuid.uuid4().hex[:8]}", f"another-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=object_store)
    for bucket in (photos, private):
        client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=photos, Key="set1/good.png", Body=PHOTO)
    client.put_object(Bucket=private, Key="private/secret.jpg", Body=SECRET)
    front = Front(upstream=object_store)
    server = ThreadingHTTPServer(("127.0.0.1", 0), front_handler(front))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    front.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", front.url)
    storage.forget_filesystems()
    yield front, photos, private
    server.shutdown()
    server.server_close()


def _items(engine, job_id: str) -> dict[int, tuple[str, str, str | None]]:
    """By line: (key, status, error)."""
    with session_scope(engine) as session:
        rows = session.execute(
            select(JobItem.line, JobItem.item_key, JobItem.status, JobItem.error).where(
                JobItem.job_id == job_id
            )
        ).all()
    return {line: (key, status, error) for line, key, status, error in rows}


def _cached_bytes(tmp_path: Path) -> list[bytes]:
    folder = tmp_path / "objects"
    return (
        [path.read_bytes() for path in folder.rglob("*") if path.is_file()]
        if folder.is_dir()
        else []
    )


def _manifest(tmp_path: Path, rows: list[str], name: str = "m.csv") -> Path:
    path = tmp_path / name
    path.write_text("image\n" + "".join(f"{row}\n" for row in rows))
    return path


def test_rows_outside_the_root_are_never_asked_for_nor_cached(
    engine, store, site: Site, tmp_path: Path
) -> None:
    """The reviewer's manifest under --root s3://photos/set1: the other bucket and the admin
    page are refused before the lookahead, the row check or anything else sends a request."""
    from agentic_iqa.runtime.submission import submit

    front, photos, private = store
    admin = f"{site.url}/admin?action=delete-everything"
    manifest = _manifest(
        tmp_path,
        [
            f"s3://{photos}/set1/good.png",
            f"s3://{private}/private/secret.jpg",
            admin,
            f"s3://{photos}/set1/../../{private}/private/secret.jpg",
        ],
    )
    job = submit(engine, JobSpec.build(manifest=manifest, root=f"s3://{photos}/set1"))
    found = _items(engine, job)
    assert found[2][1] == "pending"
    for line in (3, 4, 5):
        assert found[line][1] == "failed" and "escapes --root" in (found[line][2] or "")
    assert site.requests() == 0
    assert not [key for key in front.seen if private in key[1]]
    assert front.seen[("GET", f"/{photos}/set1/good.png")] >= 1
    cached = _cached_bytes(tmp_path)
    assert PHOTO in cached and SECRET not in cached


def test_without_a_root_only_named_or_opted_in_urls_are_read(
    engine, store, site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --root: a manifest's URLs are refused until the user opts in; loopback, whatever
    its spelling or name, stays refused with --allow-urls; the metadata address always."""
    from agentic_iqa.runtime.submission import submit

    front, photos, private = store
    port = site.url.rsplit(":", 1)[1]
    loopbacks = [
        f"http://0x7f000001:{port}/photos/good.png",
        f"http://localhost:{port}/photos/good.png",
        f"http://[::1]:{port}/photos/good.png",
        f"http://[::ffff:127.0.0.1]:{port}/photos/good.png",
        f"{site.url}/photos/good.png",
    ]
    rows = [
        f"s3://{private}/private/secret.jpg",
        "file:///etc/passwd",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://metadata.google.internal/computeMetadata/v1/",
        *loopbacks,
    ]
    manifest = _manifest(tmp_path, rows)

    closed = _items(engine, submit(engine, JobSpec.build(manifest=manifest)))
    assert [status for _, status, _ in closed.values()] == ["failed"] * len(rows)
    assert all(
        "read only where the user named it" in error or "file://" in error or "metadata" in error
        for _, _, error in closed.values()
    ), closed
    assert site.requests() == 0 and not [key for key in front.seen if private in key[1]]

    opted = _items(engine, submit(engine, JobSpec.build(manifest=manifest, allow_urls=True)))
    # another bucket: read now that the user opted in (and found to be no image)
    assert "is not a readable image" in opted[2][2]
    assert front.seen[("GET", f"/{private}/private/secret.jpg")] >= 1
    assert "file:// is read only under --root or --image-dir" in opted[3][2]
    assert "metadata service" in opted[4][2] and "metadata service" in opted[5][2]
    for line in range(6, 6 + len(loopbacks)):
        assert opted[line][1] == "failed" and "loopback address" in opted[line][2], opted[line]
    assert site.requests() == 0

    monkeypatch.setenv("AGENTIC_IQA_ALLOWED_LOCATIONS", f"{site.url}/photos/")
    listed = _items(engine, submit(engine, JobSpec.build(manifest=manifest)))
    assert listed[len(rows) + 1][1] == "pending"  # the listed host and prefix, on loopback
    assert all(listed[line][1] == "failed" for line in range(2, len(rows) + 1))
    assert site.requests() == site.requests("/photos/good.png") > 0


def test_redirects_stay_under_the_root_at_submit_and_on_the_worker(
    engine, site: Site, elsewhere: Site, tmp_path: Path
) -> None:
    """--root http://127.0.0.1:A/photos: a redirect inside the root is followed, one to
    another port is refused without asking it; and the job's policy reaches whoever runs its
    items: a URL that starts redirecting after submit fails its item there, unscored."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    site.redirects["/photos/moved.png"] = "/photos/good.png"
    site.redirects["/photos/away.png"] = f"{elsewhere.url}/photos/good.png"
    site.files["/photos/flip.png"] = PHOTO
    manifest = _manifest(
        tmp_path,
        [f"{site.url}/photos/{name}" for name in ("good.png", "moved.png", "away.png", "flip.png")],
    )
    job = submit(
        engine, JobSpec.build(manifest=manifest, root=f"{site.url}/photos", tools=["PIQE"])
    )
    found = _items(engine, job)
    assert [found[line][1] for line in (2, 3, 4, 5)] == ["pending", "pending", "failed", "pending"]
    assert "redirects to" in found[4][2] and "escapes --root" in found[4][2]

    site.redirects["/photos/flip.png"] = f"{elsewhere.url}/photos/good.png"
    run_local(engine, job, AgentsCache(), workers=1)
    found = _items(engine, job)
    assert [found[line][1] for line in (2, 3, 5)] == ["done", "done", "failed"]
    assert "escapes --root" in found[5][2]
    assert elsewhere.requests() == 0


def test_a_credential_in_a_url_is_one_bad_row_not_a_stopped_submit(
    engine, site: Site, tmp_path: Path
) -> None:
    from agentic_iqa.runtime.submission import submit

    host = site.url.removeprefix("http://")
    manifest = _manifest(
        tmp_path, [f"http://admin:hunter2-secret@{host}/photos/good.png", "good.png"]
    )
    job = submit(engine, JobSpec.build(manifest=manifest, image_dir=f"{site.url}/photos"))
    found = _items(engine, job)
    assert found[3][1] == "pending"
    assert found[2][1] == "failed" and "must not carry a user or password" in found[2][2]
    assert "hunter2-secret" not in found[2][2] and "hunter2-secret" not in found[2][0]
    assert site.requests("/photos/good.png") > 0 and site.requests() == site.requests(
        "/photos/good.png"
    )


def test_a_bad_row_is_stored_under_its_own_id_when_no_other_row_has_it(
    engine, tmp_path: Path
) -> None:
    from agentic_iqa.runtime.submission import submit

    (tmp_path / "a.png").write_bytes(PHOTO)
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "id,image,mos\ncat-7,gone.png,\ndog-2,a.png,high\ndog-2,a.png,3\n"
        "<line 9>,a.png,\nowl,a.png,4\n"
    )
    found = _items(engine, submit(engine, JobSpec.build(manifest=manifest)))
    assert found[2][:2] == ("cat-7", "failed") and "not found" in found[2][2]
    assert found[3][:2] == ("<line 3>", "failed")  # line 4 is a good row with the same id
    assert found[4][:2] == ("dog-2", "pending") and found[6][:2] == ("owl", "pending")
    assert found[5][:2] == ("<line 5>", "failed") and "reserved" in found[5][2]


def test_an_object_above_the_cap_is_refused_before_its_body_is_kept(
    engine, store, site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AGENTIC_IQA_MAX_OBJECT_BYTES: refused from the size the store declares (no GET), or
    cut off while streaming when a server declares less than it sends."""
    from agentic_iqa.runtime.submission import submit

    front, photos, _ = store
    monkeypatch.setenv("AGENTIC_IQA_MAX_OBJECT_BYTES", "1MB")
    boto3.client("s3", endpoint_url=front.upstream).put_object(
        Bucket=photos, Key="set1/huge.png", Body=b"\0" * 3_000_000
    )
    site.files["/photos/big.png"] = b"\0" * 3_000_000
    site.liars["/photos/liar.png"] = (2_000, 4_000_000)
    manifest = _manifest(
        tmp_path,
        [
            f"s3://{photos}/set1/huge.png",
            f"{site.url}/photos/big.png",
            f"{site.url}/photos/liar.png",
        ],
    )
    found = _items(
        engine,
        submit(
            engine,
            JobSpec.build(manifest=manifest, allow_urls=True, image_dir=f"{site.url}/photos"),
        ),
    )
    for line in (2, 3):
        assert "is 3000000 bytes, above the cap of 1000000 bytes" in found[line][2], found
    assert "sent more than 1000000 bytes" in found[4][2]
    assert _cached_bytes(tmp_path) == []


def test_a_stalled_url_costs_its_deadline_once_and_rows_wait_in_parallel(
    engine, site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers, then nothing: each stalled row is asked attempts times in all (the lookahead's
    failure is the row check's answer) and four of them cost about one deadline."""
    from agentic_iqa.runtime.submission import submit

    monkeypatch.setenv("AGENTIC_IQA_STORAGE_TIMEOUT", "1")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_DEADLINE", "1.5")
    stalled = [f"/photos/stall-{index}.png" for index in range(4)]
    site.stalls.update(stalled)
    manifest = _manifest(tmp_path, [path.removeprefix("/photos/") for path in stalled])
    started = time.monotonic()
    found = _items(
        engine,
        submit(engine, JobSpec.build(manifest=manifest, image_dir=f"{site.url}/photos")),
    )
    elapsed = time.monotonic() - started
    assert all(status == "failed" and "timed out" in error for _, status, error in found.values())
    for path in stalled:
        assert site.seen[("HEAD", path)] == 0 and 1 <= site.requests(path) <= 2
    assert elapsed < 5.5, elapsed  # one 1.5 s deadline per row, in parallel: not 4 x 1.5 s


def test_an_object_changed_after_submit_fails_its_item_with_both_digests_unscored(
    engine, store, site: Site, tmp_path: Path
) -> None:
    """The bytes scored are the bytes submitted: S3 by the recorded ETag (If-Match), a web
    server without ETags by the sha256 of the bytes checked at submit."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    front, photos, _ = store
    on_store = submit(
        engine,
        JobSpec.build(
            manifest=_manifest(tmp_path, ["good.png"], "s.csv"),
            tools=["PIQE"],
            image_dir=f"s3://{photos}/set1",
        ),
    )
    on_web = submit(
        engine,
        JobSpec.build(
            manifest=_manifest(tmp_path, ["good.png", "other.png"], "w.csv"),
            tools=["PIQE"],
            image_dir=f"{site.url}/photos",
        ),
    )
    boto3.client("s3", endpoint_url=front.upstream).put_object(
        Bucket=photos, Key="set1/good.png", Body=OTHER_PHOTO
    )
    site.files["/photos/good.png"] = OTHER_PHOTO
    for job in (on_store, on_web):
        run_local(engine, job, AgentsCache(), workers=1)
    store_item, web_item = _items(engine, on_store)[2], _items(engine, on_web)[2]
    assert store_item[1] == "failed" and "changed since the job was submitted" in store_item[2]
    assert store_item[2].count("etag:") == 2, store_item[2]
    assert web_item[1] == "failed" and web_item[2].count("sha256:") == 2, web_item[2]
    assert _items(engine, on_web)[3][1] == "done"
    with read_scope(engine) as session:
        for job in (on_store, on_web):
            rows = {row["item_id"]: row for row in export_rows(session, job)}
            assert not rows["good.png"]["raw_scores"]


def test_an_export_masks_a_presigned_urls_signature_and_the_item_keeps_it(
    engine, site: Site, tmp_path: Path
) -> None:
    from agentic_iqa.cli.results import export_rows
    from agentic_iqa.reports.export import write_rows
    from agentic_iqa.runtime.submission import submit

    signed = (
        f"{site.url}/photos/good.png?X-Amz-Expires=600&X-Amz-Signature=5ec12e7f00d"
        "&X-Amz-Credential=AKIAEXAMPLE%2F20261127"
    )
    manifest = _manifest(tmp_path, [signed])
    job = submit(engine, JobSpec.build(manifest=manifest, image_dir=f"{site.url}/photos"))
    with session_scope(engine) as session:
        assert session.scalar(select(JobItem.image).where(JobItem.job_id == job)) == signed
    columns, stream = export_rows(engine, job)
    rows = list(stream)
    for fmt in ("csv", "jsonl"):
        out = tmp_path / f"export.{fmt}"
        write_rows(rows, out, fmt, columns)
        text = out.read_text()
        assert "5ec12e7f00d" not in text and "AKIAEXAMPLE" not in text
        assert "X-Amz-Signature=***" in text and "X-Amz-Expires=600" in text


def test_assess_reads_the_url_it_was_given_but_not_where_that_redirects(
    results: str, site: Site, elsewhere: Site
) -> None:
    """`assess URL` names its own image (a loopback host is the user's to name), and passes
    the same gate: a redirect to a host nobody named is refused before it is asked."""
    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    site.redirects["/photos/away.png"] = f"{elsewhere.url}/photos/good.png"
    runner = CliRunner()
    named = runner.invoke(app, ["assess", f"{site.url}/photos/good.png", "--no-store", "--json"])
    assert named.exit_code == 0, named.output
    refused = runner.invoke(app, ["assess", f"{site.url}/photos/away.png", "--no-store"])
    assert refused.exit_code == 1
    assert "redirects to" in refused.output and "loopback address" in refused.output
    assert elsewhere.requests() == 0
