"""A job's local files are confined and checked when they are read, not only at submit.

Real files under a ``--root``, a real job run here (``run_local``) after the files were changed
the way a hostile or careless operator would: a folder swapped for a symlink to a folder
outside the root, a file rewritten in place, a reference replaced.  The item so touched fails
with the reason and is not scored; the others are done.  A symlink that stays inside the root
is read as before.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.exports import export_rows
from agentic_iqa.db.models import JobItem
from agentic_iqa.jobs.spec import JobSpec
from tests.conftest import REPO

PHOTO = (REPO / "examples" / "i03_blurred.png").read_bytes()
OTHER = (REPO / "examples" / "i03_reference.png").read_bytes()


def _items(engine, job_id: str) -> dict[str, tuple[str, str | None, str | None]]:
    """By item key: (status, error, image digest recorded)."""
    with session_scope(engine) as session:
        rows = session.execute(
            select(JobItem.item_key, JobItem.status, JobItem.error, JobItem.image_digest).where(
                JobItem.job_id == job_id
            )
        ).all()
    return {key: (status, error, digest) for key, status, error, digest in rows}


def _scores(engine, job_id: str) -> dict[str, object]:
    with read_scope(engine) as session:
        return {row["item_id"]: row["raw_scores"] for row in export_rows(session, job_id)}


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """root/{sub/a.png, b.png, c.png, inside.png -> b.png}, and outside/a.png (other bytes)."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.png").write_bytes(PHOTO)
    (root / "b.png").write_bytes(PHOTO)
    (root / "c.png").write_bytes(PHOTO)
    (root / "inside.png").symlink_to(root / "b.png")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.png").write_bytes(OTHER)
    manifest = root / "m.csv"
    manifest.write_text("image\nsub/a.png\nb.png\nc.png\ninside.png\n")
    return {"root": root, "outside": outside, "manifest": manifest}


def _run(engine, job: str) -> None:
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.local import run_local

    run_local(engine, job, AgentsCache(), workers=1)


@pytest.mark.parametrize("tools", [["PIQE"], None], ids=["metric job", "agent job"])
def test_a_folder_swapped_for_a_symlink_out_of_the_root_fails_its_item_unscored(
    engine, tree: dict[str, Path], tools: list[str] | None
) -> None:
    from agentic_iqa.runtime.submission import submit

    root = tree["root"]
    job = submit(engine, JobSpec.build(manifest=tree["manifest"], root=root, tools=tools))
    assert {status for status, _, _ in _items(engine, job).values()} == {"pending"}

    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(tree["outside"], target_is_directory=True)
    _run(engine, job)

    found = _items(engine, job)
    status, error, _ = found["sub/a.png"]
    assert status == "failed", found
    assert "escapes --root" in (error or "") and "symlink" in (error or ""), error
    assert str(tree["outside"].resolve() / "a.png") in (error or "")
    assert {key: found[key][0] for key in ("b.png", "c.png", "inside.png")} == dict.fromkeys(
        ("b.png", "c.png", "inside.png"), "done"
    )
    assert not _scores(engine, job)["sub/a.png"]


def test_a_file_changed_after_submit_fails_with_both_digests_shortened_and_unscored(
    engine, tree: dict[str, Path]
) -> None:
    from agentic_iqa.runtime.submission import submit

    root = tree["root"]
    job = submit(engine, JobSpec.build(manifest=tree["manifest"], root=root, tools=["PIQE"]))
    recorded = _items(engine, job)
    assert all((digest or "").startswith("sha256:") for _, _, digest in recorded.values())

    (root / "c.png").write_bytes(OTHER)  # same name, other bytes
    _run(engine, job)

    found = _items(engine, job)
    status, error, digest = found["c.png"]
    assert status == "failed" and "changed since the job was submitted" in (error or ""), error
    assert (error or "").count("sha256:") == 2 and str(digest)[:19] in (error or ""), error
    assert str(digest) not in (error or "")  # shortened, not the whole 64 digits
    assert {found[key][0] for key in ("sub/a.png", "b.png", "inside.png")} == {"done"}
    assert not _scores(engine, job)["c.png"]


def test_a_reference_replaced_after_submit_fails_its_full_reference_item(
    engine, tmp_path: Path
) -> None:
    from agentic_iqa.runtime.submission import submit

    root = tmp_path / "fr"
    root.mkdir()
    for name in ("d1.png", "d2.png", "r1.png", "r2.png"):
        (root / name).write_bytes(PHOTO)
    manifest = root / "m.csv"
    manifest.write_text("image,reference\nd1.png,r1.png\nd2.png,r2.png\n")
    job = submit(engine, JobSpec.build(manifest=manifest, root=root, tools=["PSNR"]))
    with session_scope(engine) as session:
        digests = session.scalars(select(JobItem.reference_digest)).all()
    assert all((digest or "").startswith("sha256:") for digest in digests)

    (root / "r2.png").unlink()
    (root / "r2.png").symlink_to(tmp_path / "elsewhere.png")
    (tmp_path / "elsewhere.png").write_bytes(OTHER)
    _run(engine, job)

    found = _items(engine, job)
    assert found["d1.png"][0] == "done", found
    assert found["d2.png"][0] == "failed" and "escapes --root" in (found["d2.png"][1] or "")


def test_without_the_image_check_no_digest_is_taken_and_nothing_changes(
    engine, tree: dict[str, Path]
) -> None:
    """Submit without checking images (the fast path for millions of rows) reads no bytes,
    so it records no digest: a changed file is then scored as it is when read."""
    from agentic_iqa.runtime.submission import submit

    root = tree["root"]
    job = submit(
        engine,
        JobSpec.build(manifest=tree["manifest"], root=root, tools=["PIQE"], check_images=False),
    )
    assert {digest for _, _, digest in _items(engine, job).values()} == {None}
    (root / "c.png").write_bytes(OTHER)
    _run(engine, job)
    assert _items(engine, job)["c.png"][0] == "done"


@pytest.mark.timeout(60)  # a read of the FIFO would wait for a writer for ever
def test_a_fifo_or_a_device_under_the_root_is_not_read(engine, tree: dict[str, Path]) -> None:
    """Only a regular file is opened for its bytes: a FIFO swapped in never blocks the run."""
    from agentic_iqa.runtime.submission import submit

    root = tree["root"]
    job = submit(engine, JobSpec.build(manifest=tree["manifest"], root=root, tools=["PIQE"]))
    (root / "b.png").unlink()
    os.mkfifo(root / "b.png")
    _run(engine, job)
    status, error, _ = _items(engine, job)["b.png"]
    assert status == "failed" and "not a regular file" in (error or ""), error
