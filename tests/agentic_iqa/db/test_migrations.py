"""The migrations build the schema the models describe, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError

import agentic_iqa
from agentic_iqa.db import (
    DATABASE_URL_ENV,
    alembic_config,
    build_engine,
    dispose_engines,
    make_engine,
    migrations_dir,
    upgrade,
)
from tests.agentic_iqa.db import check_schema
from tests.conftest import REPO

TABLES = {
    "runs",
    "step_records",
    "tool_logs",
    "replan_history",
    "jobs",
    "job_items",
    "vlm_calls",
    "vlm_batches",
    "batch_requests",
}


def test_upgrade_creates_the_schema_on_an_empty_database(empty_url: str) -> None:
    upgrade(empty_url)
    engine = make_engine(empty_url)
    schema = inspect(engine)
    assert set(schema.get_table_names()) == TABLES | {"alembic_version"}
    assert [c["name"] for c in schema.get_columns("tool_logs")] == [
        "id",
        "run_id",
        "iteration",
        "tool_name",
        "requested_tool",
        "object_name",
        "distortion",
        "raw_score",
        "normalized_score",
        "execution_time",
        "fallback",
        "error",
        "cached",
        "timestamp",
    ]
    assert {c["name"] for c in schema.get_columns("runs")} >= {
        "query",
        "image_path",
        "status",
        "state_json",
        "final_answer",
        "quality_score",
        "error",
        "iteration_count",
        "job_id",
        "created_at",
        "started_at",
        "finished_at",
    }
    uniques = {
        table: {(u["name"], tuple(u["column_names"])) for u in schema.get_unique_constraints(table)}
        for table in ("step_records", "tool_logs", "replan_history")
    }
    assert uniques == {
        "step_records": {
            ("uq_step_records_run_id_step_iteration", ("run_id", "step", "iteration"))
        },
        "tool_logs": {
            (
                "uq_tool_logs_run_id_iteration_object_name_distortion",
                ("run_id", "iteration", "object_name", "distortion"),
            )
        },
        "replan_history": {("uq_replan_history_run_id_iteration", ("run_id", "iteration"))},
    }
    for table in ("step_records", "tool_logs", "replan_history"):
        (foreign_key,) = schema.get_foreign_keys(table)
        assert foreign_key["referred_table"] == "runs"
        assert foreign_key["options"]["ondelete"] == "CASCADE"
    indexes = {
        i["name"]: i["column_names"] for t in ("runs", "tool_logs") for i in schema.get_indexes(t)
    }
    assert indexes["ix_runs_job_id_status"] == ["job_id", "status"]
    assert indexes["ix_tool_logs_tool_name"] == ["tool_name"]
    timestamp = {c["name"]: c["type"] for c in schema.get_columns("runs")}["created_at"]
    if engine.dialect.name == "postgresql":
        assert timestamp.timezone is True
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).all() == [
            ("0018",)
        ]


def test_models_and_migrations_agree(engine: Engine) -> None:
    assert check_schema(engine) == []


def test_a_job_mode_no_report_knows_is_refused_by_the_database(engine: Engine) -> None:
    insert = text(
        "INSERT INTO jobs (id, name, manifest, default_query, status, "
        "max_replan_iterations, created_at, mode) VALUES (:id, 'j', 'm.csv', 'q', "
        "'running', 2, CURRENT_TIMESTAMP, :mode)"
    )
    with engine.begin() as connection:
        connection.execute(insert, {"id": "good", "mode": "vlm"})
    with (
        pytest.raises(IntegrityError, match="(?i)ck_jobs_mode|check constraint"),
        engine.begin() as connection,
    ):
        connection.execute(insert, {"id": "bad", "mode": "oracle"})


def test_check_schema_reports_drift(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(text("DROP INDEX ix_tool_logs_tool_name"))
    differences = check_schema(engine)
    assert [(kind, index.name) for kind, index in differences] == [
        ("add_index", "ix_tool_logs_tool_name")
    ]


def test_downgrade_removes_every_table(empty_url: str) -> None:
    upgrade(empty_url)
    command.downgrade(alembic_config(empty_url), "base")
    engine = build_engine(empty_url, pooled=False)
    try:
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_without_a_url_uses_the_configured_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/configured.sqlite3"
    monkeypatch.setenv(DATABASE_URL_ENV, url)
    upgrade()
    try:
        assert check_schema(make_engine()) == []
    finally:
        dispose_engines(url)


def test_the_alembic_command_line_takes_the_url_from_x_or_the_environment(
    tmp_path: Path,
) -> None:
    env = {**os.environ, DATABASE_URL_ENV: f"sqlite:///{tmp_path}/from-env.sqlite3"}
    alembic = [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini")]
    x_url = f"sqlite:///{tmp_path}/from-x.sqlite3"
    for extra in ([], ["-x", f"url={x_url}"]):
        subprocess.run(
            [*alembic, *extra, "upgrade", "head"],
            env=env,
            cwd=tmp_path,
            check=True,
            capture_output=True,
            timeout=60,
        )
    for name in ("from-env", "from-x"):
        engine = build_engine(f"sqlite:///{tmp_path}/{name}.sqlite3", pooled=False)
        try:
            assert check_schema(engine) == []
        finally:
            engine.dispose()


def test_offline_mode_writes_the_sql(capsys: pytest.CaptureFixture[str]) -> None:
    command.upgrade(alembic_config("postgresql://u@db.example/iqa"), "head", sql=True)
    sql = capsys.readouterr().out
    assert "CREATE TABLE tool_logs" in sql
    assert (
        "CONSTRAINT fk_tool_logs_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) "
        "ON DELETE CASCADE" in sql
    )


def test_alembic_config_keeps_percent_signs_in_the_url() -> None:
    config = alembic_config("postgresql+psycopg://u:p%40ss@db.example/iqa")
    assert config.get_main_option("sqlalchemy.url") == (
        "postgresql+psycopg://u:p%40ss@db.example/iqa"
    )


def test_migrations_are_found_beside_the_package_or_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert migrations_dir() == REPO / "migrations"
    installed = tmp_path / "site-packages" / "agentic_iqa"
    (installed / "migrations").mkdir(parents=True)
    (installed / "migrations" / "env.py").touch()
    monkeypatch.setattr(agentic_iqa, "__file__", str(installed / "__init__.py"))
    assert migrations_dir() == installed / "migrations"
    (installed / "migrations" / "env.py").unlink()
    with pytest.raises(FileNotFoundError, match="Alembic migrations not found"):
        migrations_dir()


def test_0004_adds_vlm_calls_and_downgrades_to_0003(empty_url: str) -> None:
    """Upgrade keeps existing runs (the cache on by default); downgrade removes only 0004."""
    command.upgrade(alembic_config(empty_url), "0003")
    engine = build_engine(empty_url, pooled=False)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO runs (id, query, image_path, status, state_json, iteration_count,"
                    " max_replan_iterations, created_at, resends) VALUES ('r1', 'q', 'i.png',"
                    " 'pending', '{}', 0, 2, CURRENT_TIMESTAMP, 0)"
                )
            )
        command.upgrade(alembic_config(empty_url), "0004")
        schema = inspect(engine)
        assert [c["name"] for c in schema.get_columns("vlm_calls")] == [
            "id",
            "run_id",
            "step",
            "iteration",
            "attempt",
            "seq",
            "role",
            "task",
            "backend",
            "model",
            "input_tokens",
            "output_tokens",
            "cached_tokens",
            "latency_s",
            "cache_hit",
            "request_key",
            "created_at",
        ]
        assert {
            (u["name"], tuple(u["column_names"]))
            for u in schema.get_unique_constraints("vlm_calls")
        } == {
            (
                "uq_vlm_calls_run_id_step_iteration_attempt_seq",
                ("run_id", "step", "iteration", "attempt", "seq"),
            )
        }
        with engine.connect() as connection:
            assert connection.execute(text("SELECT vlm_cache FROM runs")).scalar() in (True, 1)
        command.upgrade(alembic_config(empty_url), "head")
        assert check_schema(engine) == []
        command.downgrade(alembic_config(empty_url), "0003")
        schema = inspect(engine)
        assert "vlm_calls" not in schema.get_table_names()
        assert "vlm_cache" not in {c["name"] for c in schema.get_columns("runs")}
        assert "vlm_cache" not in {c["name"] for c in schema.get_columns("jobs")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM runs")).all() == [("r1",)]
    finally:
        engine.dispose()


def _insert_job(engine: Engine) -> None:
    """A job row as every revision since 0002 can hold it."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO jobs (id, name, manifest, default_query, status,"
                " max_replan_iterations, dispatch, vlm_cache, created_at) VALUES ('j1', 'n',"
                " 'm.csv', 'q', 'running', 2, 'workers', true, CURRENT_TIMESTAMP)"
            )
        )


def test_0005_adds_job_tools_and_downgrades_to_0004(empty_url: str) -> None:
    """Jobs stored before metric jobs existed stay agent jobs (tools NULL); downgrade keeps them."""
    command.upgrade(alembic_config(empty_url), "0004")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        command.upgrade(alembic_config(empty_url), "0005")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT tools FROM jobs")).all() == [(None,)]
            connection.execute(text("UPDATE jobs SET tools = 'PIQE,SSIM'"))
        command.downgrade(alembic_config(empty_url), "0004")
        assert "tools" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM jobs")).all() == [("j1",)]
    finally:
        engine.dispose()


def test_0006_adds_job_and_call_errors_and_downgrades_to_0005(empty_url: str) -> None:
    """Jobs and calls stored before have no error (NULL); downgrade drops the columns only."""
    command.upgrade(alembic_config(empty_url), "0005")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        command.upgrade(alembic_config(empty_url), "0006")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT error FROM jobs")).all() == [(None,)]
            connection.execute(text("UPDATE jobs SET error = 'stopped'"))
        assert "error" in {c["name"] for c in inspect(engine).get_columns("vlm_calls")}
        command.downgrade(alembic_config(empty_url), "0005")
        assert "error" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert "error" not in {c["name"] for c in inspect(engine).get_columns("vlm_calls")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM jobs")).all() == [("j1",)]
    finally:
        engine.dispose()


def test_0010_adds_batches_keeps_runs_not_waiting_and_downgrades_to_0009(empty_url: str) -> None:
    """Runs stored before wait for no batch; calls stored before came from no batch."""
    command.upgrade(alembic_config(empty_url), "0009")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO runs (id, query, image_path, status, state_json, iteration_count, "
                    "max_replan_iterations, job_id, created_at, resends, vlm_cache) VALUES ('r1', "
                    "'q', 'a.png', 'running', '{}', 0, 2, 'j1', CURRENT_TIMESTAMP, 0, true)"
                )
            )
        command.upgrade(alembic_config(empty_url), "0010")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT id, awaiting_batch FROM runs")).all() == [
                ("r1", False)
            ]
        command.upgrade(alembic_config(empty_url), "head")
        assert check_schema(engine) == []
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO job_items (job_id, line, item_key, status) "
                    "VALUES ('j1', 2, 'a', 'pending')"
                )
            )
            assert connection.execute(
                text("SELECT image_digest, reference_digest FROM job_items")
            ).all() == [(None, None)]
        command.downgrade(alembic_config(empty_url), "0010")
        assert "image_digest" not in {c["name"] for c in inspect(engine).get_columns("job_items")}
        command.downgrade(alembic_config(empty_url), "0009")
        assert {"vlm_batches", "batch_requests"}.isdisjoint(inspect(engine).get_table_names())
        assert "awaiting_batch" not in {c["name"] for c in inspect(engine).get_columns("runs")}
        assert "batch" not in {c["name"] for c in inspect(engine).get_columns("vlm_calls")}
    finally:
        engine.dispose()


def test_0012_adds_job_specs_and_groups_and_downgrades_to_0011(empty_url: str) -> None:
    """Jobs stored before keep no spec (it is reconstructed from their columns when read) and
    belong to no group; downgrade drops the columns only."""
    command.upgrade(alembic_config(empty_url), "0011")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        command.upgrade(alembic_config(empty_url), "0012")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT spec_json, job_group FROM jobs")).all() == [
                (None, None)
            ]
            connection.execute(text("UPDATE jobs SET job_group = 'g', spec_json = '{}'"))
        assert "ix_jobs_job_group" in {i["name"] for i in inspect(engine).get_indexes("jobs")}
        command.downgrade(alembic_config(empty_url), "0011")
        columns = {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert not {"spec_json", "job_group"} & columns
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM jobs")).all() == [("j1",)]
    finally:
        engine.dispose()


def test_0013_adds_the_lease_holder_and_downgrades_to_0012(empty_url: str) -> None:
    """Jobs stored before have no holder (their leases are waited out); downgrade drops the
    column only."""
    command.upgrade(alembic_config(empty_url), "0012")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        command.upgrade(alembic_config(empty_url), "0013")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT lease_holder FROM jobs")).all() == [(None,)]
            connection.execute(text("UPDATE jobs SET lease_holder = '{}'"))
        command.downgrade(alembic_config(empty_url), "0012")
        assert "lease_holder" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT id FROM jobs")).all() == [("j1",)]
    finally:
        engine.dispose()


def test_0014_counts_the_items_of_jobs_stored_before_and_downgrades_to_0013(empty_url: str) -> None:
    """A job stored before gets its items' counts by state from the upgrade (a job without
    items counts 0), the indexes big jobs need, no headline yet; downgrade drops them."""
    command.upgrade(alembic_config(empty_url), "0013")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, manifest, default_query, status,"
                    " max_replan_iterations, dispatch, vlm_cache, created_at) VALUES ('j2', 'n',"
                    " 'm.csv', 'q', 'done', 2, 'workers', true, CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO job_items (job_id, line, item_key, status) VALUES (:job, :line,"
                    " :key, :status)"
                ),
                [
                    {"job": "j1", "line": line, "key": f"k{line}", "status": status}
                    for line, status in enumerate(
                        ["pending"] * 3 + ["queued"] * 2 + ["done"] * 4 + ["failed", "cancelled"],
                        start=2,
                    )
                ],
            )
        command.upgrade(alembic_config(empty_url), "0014")
        columns = (
            "items_pending, items_queued, items_done, items_failed, items_cancelled, headline_json"
        )
        with engine.begin() as connection:
            assert connection.execute(
                text(f"SELECT id, {columns} FROM jobs ORDER BY id")
            ).all() == [("j1", 3, 2, 4, 1, 1, None), ("j2", 0, 0, 0, 0, 0, None)]
        indexes = {
            index["name"]: index["column_names"]
            for table in ("job_items", "runs")
            for index in inspect(engine).get_indexes(table)
        }
        assert indexes["ix_job_items_job_id_status_id"] == ["job_id", "status", "id"]
        assert indexes["ix_job_items_job_id_id"] == ["job_id", "id"]
        assert indexes["ix_runs_job_id_status"] == ["job_id", "status"]
        assert "ix_job_items_job_id_status" not in indexes and "ix_runs_job_id" not in indexes
        command.downgrade(alembic_config(empty_url), "0013")
        assert not {"items_done", "headline_json"} & {
            c["name"] for c in inspect(engine).get_columns("jobs")
        }
        indexes = {
            index["name"]
            for table in ("job_items", "runs")
            for index in inspect(engine).get_indexes(table)
        }
        assert {"ix_job_items_job_id_status", "ix_runs_job_id"} <= indexes
        with engine.connect() as connection:
            assert connection.execute(text("SELECT COUNT(*) FROM job_items")).scalar() == 11
    finally:
        engine.dispose()


def test_0009_checks_job_modes_keeps_the_jobs_and_downgrades_to_0008(empty_url: str) -> None:
    command.upgrade(alembic_config(empty_url), "0008")
    engine = build_engine(empty_url, pooled=False)
    bad = text("UPDATE jobs SET mode = 'oracle'")
    try:
        _insert_job(engine)
        command.upgrade(alembic_config(empty_url), "0009")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT id, mode, status FROM jobs")).all() == [
                ("j1", "agent", "running")
            ]
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(bad)
        command.downgrade(alembic_config(empty_url), "0008")
        with engine.begin() as connection:
            connection.execute(bad)
            assert connection.execute(text("SELECT mode FROM jobs")).scalar() == "oracle"
    finally:
        engine.dispose()


def test_0008_adds_job_modes_datasets_and_item_metadata_and_downgrades_to_0007(
    empty_url: str,
) -> None:
    """Jobs stored before are agent jobs, or tools jobs when they are metric jobs."""
    command.upgrade(alembic_config(empty_url), "0007")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO jobs (id, name, manifest, default_query, status, "
                    "max_replan_iterations, vlm_cache, dispatch, tools, created_at) VALUES ('j2', "
                    "'m', 'm.csv', 'q', 'running', 2, true, 'local', 'PIQE', CURRENT_TIMESTAMP)"
                )
            )
        command.upgrade(alembic_config(empty_url), "0008")
        with engine.begin() as connection:
            assert connection.execute(
                text("SELECT id, mode, dataset_json FROM jobs ORDER BY id")
            ).all() == [("j1", "agent", None), ("j2", "tools", None)]
        command.upgrade(alembic_config(empty_url), "head")  # and the later ones on top
        assert check_schema(engine) == []
        command.downgrade(alembic_config(empty_url), "0007")
        assert "mode" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert "meta_json" not in {c["name"] for c in inspect(engine).get_columns("job_items")}
    finally:
        engine.dispose()


def test_0007_adds_the_job_configuration_and_downgrades_to_0006(empty_url: str) -> None:
    """Jobs stored before keep no configuration (NULL: they run as the environment says)."""
    command.upgrade(alembic_config(empty_url), "0006")
    engine = build_engine(empty_url, pooled=False)
    try:
        _insert_job(engine)
        command.upgrade(alembic_config(empty_url), "0007")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT config_json, waiting FROM jobs")).all() == [
                (None, None)
            ]
        command.downgrade(alembic_config(empty_url), "0006")
        assert "config_json" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert "endpoint" not in {c["name"] for c in inspect(engine).get_columns("vlm_calls")}
    finally:
        engine.dispose()


@pytest.mark.slow
def test_upgrades_started_at_once_on_postgresql_run_one_after_another(
    postgres_admin_url: str,
) -> None:
    """Four `db upgrade` processes at once on an empty database, three times over: each exits
    0 and the schema ends at head (without the lock, most of them failed with a
    UniqueViolation while creating the same tables)."""
    from sqlalchemy import create_engine

    from agentic_iqa.db.engine import script_heads
    from tests.conftest import scratch_postgres

    probe = "import sys; from agentic_iqa.db import upgrade; upgrade(sys.argv[1])"
    for _ in range(3):
        with scratch_postgres(postgres_admin_url) as url:
            processes = [
                subprocess.Popen(
                    [sys.executable, "-c", probe, url],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for _ in range(4)
            ]
            outcomes = [(process.wait(timeout=120), process.stdout.read()) for process in processes]
            assert [code for code, _ in outcomes] == [0, 0, 0, 0], outcomes
            engine = create_engine(url)
            try:
                with engine.connect() as connection:
                    stored = set(
                        connection.scalars(text("SELECT version_num FROM alembic_version"))
                    )
            finally:
                engine.dispose()
            assert stored == script_heads()
