"""A submit streams its manifest into the database in bulk, and its first items run
while the rest of its rows are still being read; ``submit`` takes a JobSpec only."""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import event, select, text

from agentic_iqa.db import jobs as store
from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, read_scope, session_scope
from agentic_iqa.db.jobs import get_job, latest_job
from agentic_iqa.db.models import JobItem
from agentic_iqa.jobs.manifest import PREFETCH_ROWS, PROCESS_CHECKS_AFTER
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime import submission as submission_module
from agentic_iqa.runtime.local import run_local
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import (
    SUBMIT_CHUNK,
    SUBMIT_WAIT_SECONDS,
    Submission,
    SubmitStopped,
    submit,
)
from tests.conftest import natural_image, scratch_postgres

#: Long enough for a row to be stored, claimed and scored on a loaded machine.
PATIENCE = 60.0


def photo(path: Path, seed: int = 0) -> Path:
    Image.fromarray(natural_image(seed, size=(96, 72))).save(path)
    return path


def items(engine, job_id: str) -> dict[str, tuple[int, str, str | None]]:
    with read_scope(engine) as session:
        rows = session.execute(
            select(JobItem.item_key, JobItem.line, JobItem.status, JobItem.error).where(
                JobItem.job_id == job_id
            )
        ).all()
    return {key: (line, status, error) for key, line, status, error in rows}


def until(condition: Callable[[], bool], seconds: float = PATIENCE) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


class Pipe:
    """A CSV manifest written through a named pipe a row at a time, as the test says: the
    submit reads it as it comes, as it would a generator that produces rows slowly."""

    def __init__(self, path: Path, header: str) -> None:
        os.mkfifo(path)
        self.path = path
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lines.put(header)
        self._writer = threading.Thread(target=self._write, daemon=True)
        self._writer.start()

    def _write(self) -> None:
        with open(self.path, "w") as handle:  # blocks until the submit opens the manifest
            while (line := self._lines.get()) is not None:
                handle.write(line + "\n")
                handle.flush()

    def write(self, line: str) -> None:
        self._lines.put(line)

    def close(self) -> None:
        """The end of the manifest (once the submit has opened it)."""
        self._lines.put(None)
        self._writer.join(PATIENCE)


def job_of(engine) -> str | None:
    with read_scope(engine) as session:
        job = latest_job(session)
        return job.id if job is not None else None


def test_the_first_item_is_done_before_the_last_row_is_read(engine, agents, tmp_path):
    photo(tmp_path / "p.png")
    pipe = Pipe(tmp_path / "m.csv", "id,image,mos")
    pipe.write("first,p.png,3")
    submission = Submission(engine, JobSpec.build(manifest=pipe.path, tools=["PIQE"]))
    job_id = submission.started()
    assert items(engine, job_id) == {"first": (2, "pending", None)}
    written: dict[str, bool] = {}

    def write_the_rest_once_the_first_is_done() -> None:
        written["first done"] = until(lambda: items(engine, job_id)["first"][1] == "done")
        pipe.write("last,p.png,4")
        pipe.close()

    writer = threading.Thread(target=write_the_rest_once_the_first_is_done, daemon=True)
    writer.start()
    run_local(engine, job_id, agents, workers=1)  # waits for the rows still to come
    assert submission.result() == job_id
    writer.join(PATIENCE)
    assert written["first done"], "the first item never ran while the manifest was open"
    final = progress(engine, job_id)
    assert (final.status, final.counts) == ("done", {"done": 2})
    assert items(engine, job_id)["last"] == (3, "done", None)


def test_a_job_is_not_finished_while_its_rows_are_still_coming(engine, agents, tmp_path):
    photo(tmp_path / "p.png")
    pipe = Pipe(tmp_path / "m.csv", "id,image")
    pipe.write(",missing.png")  # a bad row: failed at once, so every stored item has ended
    submission = Submission(engine, JobSpec.build(manifest=pipe.path))
    job_id = submission.started()
    assert items(engine, job_id)["<line 2>"][1] == "failed"
    with session_scope(engine) as session:
        assert store.finish_complete_jobs(session) == 0  # the supervisor's sweep leaves it
    with read_scope(engine) as session:
        job = get_job(session, job_id)
        assert (job.status, job.submitting, job.finished_at) == ("running", True, None)
    pipe.write("good,p.png")
    pipe.close()
    assert submission.result() == job_id
    with read_scope(engine) as session:
        assert store.get_job(session, job_id).submitting is False
    assert progress(engine, job_id).status == "running"  # "good" waits to run
    run_local(engine, job_id, agents, workers=1)
    final = progress(engine, job_id)
    assert (final.status, final.counts) == ("done", {"done": 1, "failed": 1})


def test_a_submit_stopped_halfway_cancels_its_job_and_says_where(engine, tmp_path):
    photo(tmp_path / "p.png")
    pipe = Pipe(tmp_path / "m.csv", "id,image")
    pipe.write("a,p.png")
    pipe.write("b,p.png")
    submission = Submission(engine, JobSpec.build(manifest=pipe.path))
    job_id = submission.started()
    assert until(lambda: len(items(engine, job_id)) == 2)
    submission.stop()
    with pytest.raises(SubmitStopped):
        submission.result()
    pipe.close()
    final = progress(engine, job_id)
    assert (final.status, final.counts) == ("cancelled", {"cancelled": 2})
    assert final.error == (
        "submit ended after line 3: it was stopped; the rows after it were "
        "not stored: submit the job again"
    )


@pytest.fixture
def counted(engine) -> Iterator[list[tuple[str, int]]]:
    """The statements SQLAlchemy sends that insert items: (SQL, rows) each."""
    seen: list[tuple[str, int]] = []

    def before(_conn, _cursor, statement, parameters, _context, executemany) -> None:
        if "INTO JOB_ITEMS" in statement.upper().replace('"', ""):
            seen.append((statement, len(parameters) if executemany else 1))

    event.listen(engine, "before_cursor_execute", before)
    yield seen
    event.remove(engine, "before_cursor_execute", before)


def one_image_manifest(folder: Path, rows: int) -> Path:
    photo(folder / "p.png")
    path = folder / "m.csv"
    path.write_text(
        "id,image,mos\n" + "".join(f"r{index},p.png,{index % 5}\n" for index in range(rows))
    )
    return path


def test_sqlite_stores_a_chunk_of_items_per_statement(engine, counted, tmp_path):
    rows = 5 * SUBMIT_CHUNK
    manifest = one_image_manifest(tmp_path, rows)
    started = time.monotonic()
    job_id = submit(engine, JobSpec.build(manifest=manifest, tools=["PIQE"], check_images=False))
    seconds = time.monotonic() - started
    assert progress(engine, job_id).counts == {"pending": rows}
    assert sum(count for _sql, count in counted) == rows
    # A chunk per statement; a chunk may be cut short when its rows come slower than
    # SUBMIT_WAIT_SECONDS, at most once per such wait.
    allowed = math.ceil(rows / SUBMIT_CHUNK) + seconds / SUBMIT_WAIT_SECONDS
    assert len(counted) <= allowed, (len(counted), seconds)


def test_postgresql_stores_items_by_copy_a_chunk_per_statement(postgres_admin_url, tmp_path):
    rows = 5 * SUBMIT_CHUNK
    manifest = one_image_manifest(tmp_path, rows)
    with scratch_postgres(postgres_admin_url) as url:
        upgrade(url)
        engine = make_engine(url)
        with engine.begin() as connection:  # PostgreSQL itself counts the statements
            connection.execute(
                text(
                    "CREATE TABLE item_statements (query text);"
                    "CREATE FUNCTION item_statement() RETURNS trigger LANGUAGE plpgsql AS $$ "
                    "BEGIN INSERT INTO item_statements VALUES (left(current_query(), 40)); "
                    "RETURN NULL; END $$;"
                    "CREATE TRIGGER item_statements AFTER INSERT ON job_items "
                    "FOR EACH STATEMENT EXECUTE FUNCTION item_statement();"
                )
            )
        started = time.monotonic()
        job_id = submit(
            engine, JobSpec.build(manifest=manifest, tools=["PIQE"], check_images=False)
        )
        seconds = time.monotonic() - started
        with engine.connect() as connection:
            statements = (
                connection.execute(text("SELECT query FROM item_statements")).scalars().all()
            )
        assert progress(engine, job_id).counts == {"pending": rows}
    assert statements and all(query.startswith("COPY job_items") for query in statements)
    allowed = math.ceil(rows / SUBMIT_CHUNK) + seconds / SUBMIT_WAIT_SECONDS
    assert len(statements) <= allowed, (len(statements), seconds)


def test_submit_takes_a_spec_and_nothing_else(engine, tmp_path):
    manifest = one_image_manifest(tmp_path, 2)
    with pytest.raises(TypeError, match="takes a JobSpec, not PosixPath"):
        submit(engine, manifest)
    with pytest.raises(TypeError):
        submit(engine, manifest, tools=["PIQE"])  # type: ignore[call-arg]
    assert not hasattr(submission_module, "spec_from_keywords")
    with session_scope(engine) as session:
        assert latest_job(session) is None


def test_a_later_row_without_the_reference_a_tool_needs_is_a_bad_row(engine, tmp_path):
    for name, seed in (("a.png", 0), ("a_ref.png", 1), ("b.png", 2)):
        photo(tmp_path / name, seed)
    manifest = tmp_path / "pairs.csv"
    manifest.write_text("id,image,reference\nx,a.png,a_ref.png\ny,b.png,\n")
    job_id = submit(engine, JobSpec.build(manifest=manifest, tools=["SSIM"]))
    assert items(engine, job_id) == {
        "x": (2, "pending", None),
        "y": (
            3,
            "failed",
            "line 3 (id 'y'): SSIM is a full-reference tool and this row has "
            "no reference: give a `reference` for every row, or leave out the "
            "full-reference tools",
        ),
    }


def test_images_checked_in_parallel_keep_every_rule_of_file_order(engine, tmp_path):
    """Rows checked in threads, then (past PROCESS_CHECKS_AFTER) in processes: a bad image, a
    duplicate and an id a bad row gave are judged in file order, as one row at a time was."""
    photo(tmp_path / "p.png")
    (tmp_path / "cut.png").write_bytes((tmp_path / "p.png").read_bytes()[:300])
    count = PROCESS_CHECKS_AFTER + 4 * PREFETCH_ROWS
    lines = [f"r{index},p.png" for index in range(count)]
    late = PROCESS_CHECKS_AFTER + PREFETCH_ROWS  # checked in the processes
    lines[5] = "dup,cut.png"  # line 7: bad image, gave id dup
    lines[late] = "dup,p.png"  # good: takes dup, the bad row keeps its line
    lines[late + 9] = "dup,p.png"  # a duplicate of that one
    lines[late + 20] = ",cut.png"  # bad, no id of its own
    lines[late + 30] = "own,cut.png"  # bad, and no other row has its id: keeps it
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,image\n" + "\n".join(lines) + "\n")
    job_id = submit(engine, JobSpec.build(manifest=manifest))
    found = items(engine, job_id)
    assert len(found) == count
    failed = {key: value for key, value in found.items() if value[1] == "failed"}
    good, duplicate, cut, own = late + 2, late + 11, late + 22, late + 32
    assert set(failed) == {"<line 7>", f"<line {duplicate}>", f"<line {cut}>", "own"}
    assert failed["<line 7>"][2].startswith(
        "line 7 (id 'dup'): image 'cut.png' on line 7 is not a readable image"
    )
    assert failed[f"<line {duplicate}>"][2] == (
        f"line {duplicate}: duplicate id 'dup' on line {duplicate}: first used on line {good}"
    )
    assert failed[f"<line {cut}>"][2].startswith(
        f"line {cut} (id 'cut.png'): image 'cut.png' on line {cut} is not a readable image"
    )
    assert failed["own"][0] == own and failed["own"][2].startswith(
        f"line {own} (id 'own'): image 'cut.png' on line {own} is not a readable image"
    )
    assert found["dup"] == (good, "pending", None)


def test_ids_seen_stay_exact_once_folded_into_hashes():
    from agentic_iqa.jobs.manifest import SeenIds

    seen = SeenIds()
    count = SeenIds.RECENT + 1000  # the first RECENT are folded into the arrays
    for index in range(count):
        seen.claim(f"photos/{index:06d}.jpg", index + 2)
    assert [
        seen.line_of(f"photos/{index:06d}.jpg")
        for index in (0, 777, SeenIds.RECENT - 1, SeenIds.RECENT, count - 1)
    ] == [2, 779, SeenIds.RECENT + 1, SeenIds.RECENT + 2, count + 1]
    assert seen.line_of("photos/000000.jpeg") is None and seen.line_of("") is None
    assert seen.line_of(f"photos/{count:06d}.jpg") is None
