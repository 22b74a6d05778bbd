"""The hot queries of a big job read a window of an index, on SQLite and PostgreSQL.

Each query is taken as the product issues it (the statements SQLAlchemy sends while the code
under test runs) and explained by the database: SQLite's EXPLAIN QUERY PLAN, PostgreSQL's
EXPLAIN ANALYZE (so the rows it actually read and threw away are counted, not only its plan).
The job sits between an earlier job and a later one, part of it already claimed, with the
planner's statistics fresh, as a submit leaves them: a claim or a page of an export that walked
the table's other rows, or sorted the job's, would show it here.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

from agentic_iqa.db import jobs as store
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.exports import export_rows
from agentic_iqa.db.items import counts
from agentic_iqa.db.jobs import get_job
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.lifecycle import cancel
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit

#: Items of each job: enough that a walk past another job's rows, or the job's own claimed
#: ones, is thousands of rows against a window's few.
ITEMS = 3000
WINDOW = 8


def _manifest(folder: Path, photo: Path, name: str) -> Path:
    path = folder / f"{name}.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos", "id"])
        writer.writerows([str(photo), 10 + index % 80, f"{name}{index}"] for index in range(ITEMS))
    return path


def _job(engine: Engine, folder: Path, photo: Path, name: str) -> str:
    spec = JobSpec.build(
        manifest=_manifest(folder, photo, name), tools=("PIQE",), check_images=False, name=name
    )
    return submit(engine, spec)


@contextmanager
def _statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """The statements (and their parameters) sent while the block runs."""
    sent: list[tuple[str, Any]] = []

    def seen(
        _connection: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
    ) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", seen)


def _item_selects(sent: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [
        (statement, parameters)
        for statement, parameters in sent
        if statement.lstrip().upper().startswith("SELECT") and "job_items" in statement
    ]


def _three_jobs(engine: Engine, tmp_path: Path, photo: Path) -> str:
    """An earlier job (ended: cancelled), the job (the first third of its items claimed),
    a later one (waiting); statistics refreshed.  Returns the job's id."""
    earlier = _job(engine, tmp_path, photo, "earlier")
    job_id = _job(engine, tmp_path, photo, "job")
    _job(engine, tmp_path, photo, "later")
    cancel(engine, earlier)
    with session_scope(engine) as session:
        claimed = store.claim_items(session, get_job(session, job_id, lock=True), ITEMS // 3)
    assert len(claimed) == ITEMS // 3
    with engine.begin() as connection:  # what a submit leaves: the planner knows the rows
        for table in ("job_items", "runs"):
            connection.exec_driver_sql(f"ANALYZE {table}")
    return job_id


def _plan(engine: Engine, statement: str, parameters: Any) -> Any:
    """SQLite: the plan's lines; PostgreSQL: the executed plan (rolled back: a claim locks)."""
    with engine.connect() as connection:
        transaction = connection.begin()
        try:
            if engine.dialect.name == "sqlite":
                return [
                    row[3]
                    for row in connection.exec_driver_sql(
                        f"EXPLAIN QUERY PLAN {statement}", parameters
                    )
                ]
            (document,) = connection.exec_driver_sql(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters
            ).one()
            return (
                json.loads(document)[0]["Plan"]
                if isinstance(document, str)
                else document[0]["Plan"]
            )
        finally:
            transaction.rollback()


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _reads_a_window(
    engine: Engine, statement: str, parameters: Any, index: str, window: int
) -> None:
    """The statement reads the job's items from ``index`` (SQLite) or from an index,
    throwing away at most a window's rows (PostgreSQL), and sorts nothing."""
    plan = _plan(engine, statement, parameters)
    if engine.dialect.name == "sqlite":
        assert not [line for line in plan if line.startswith("SCAN job_items")], plan
        assert not [line for line in plan if "TEMP B-TREE" in line], plan
        assert [
            line
            for line in plan
            if line.startswith("SEARCH job_items USING") and f"INDEX {index} " in line
        ], plan
        return
    nodes = list(_nodes(plan))
    assert not [node for node in nodes if node["Node Type"] in ("Sort", "Incremental Sort")]
    scans = [node for node in nodes if node.get("Relation Name") == "job_items"]
    assert scans and all(
        node["Node Type"] in ("Index Scan", "Index Only Scan") for node in scans
    ), scans
    assert all(node.get("Index Name") for node in scans), scans
    thrown = sum(node.get("Rows Removed by Filter", 0) for node in scans)
    assert thrown <= window, (thrown, scans)
    assert sum(node["Actual Rows"] for node in scans) <= window + 1, scans


def test_a_claim_reads_the_next_window_of_the_index(engine, tmp_path, photo) -> None:
    job_id = _three_jobs(engine, tmp_path, photo)
    with _statements(engine) as sent, session_scope(engine) as session:
        claimed = store.claim_items(session, get_job(session, job_id, lock=True), WINDOW)
    assert len(claimed) == WINDOW
    (select,) = [
        (statement, parameters)
        for statement, parameters in _item_selects(sent)
        if "pending" in str(parameters) or "'pending'" in statement
    ]
    _reads_a_window(engine, *select, "ix_job_items_job_id_status_id", WINDOW)


def test_a_page_of_an_export_reads_a_page_of_the_index(engine, tmp_path, photo) -> None:
    """The second page (the first may start where the job's items do): a page's rows, in id
    order, from the index, however many items the job and the others have."""
    job_id = _three_jobs(engine, tmp_path, photo)
    with _statements(engine) as sent, read_scope(engine) as session:
        rows = export_rows(session, job_id)
        first_two_pages = [next(rows) for _ in range(501)]
    assert [row["item_id"] for row in first_two_pages[:2]] == ["job0", "job1"]
    pages = [
        (statement, parameters)
        for statement, parameters in _item_selects(sent)
        if "ORDER BY" in statement.upper()
    ]
    assert len(pages) >= 2
    _reads_a_window(engine, *pages[1], "ix_job_items_job_id_id", 500)


def test_counts_read_the_jobs_row_not_its_items(engine, tmp_path, photo) -> None:
    job_id = _three_jobs(engine, tmp_path, photo)
    with _statements(engine) as sent, read_scope(engine) as session:
        counted = counts(session, job_id)
    assert counted == {"pending": ITEMS - ITEMS // 3, "queued": ITEMS // 3}
    assert sent and not [statement for statement, _ in sent if "job_items" in statement]
    with _statements(engine) as sent:
        current = progress(engine, job_id)
    assert (current.total, current.finished) == (ITEMS, 0)
    assert not [
        statement
        for statement, _ in sent
        if "job_items" in statement and "GROUP BY" in statement.upper()
    ]
