"""Secrets stay secret on real workers: nothing of them in ``inspect conf``/``report``/``stats``
or the worker's log, and a worker configured only by ``_FILE`` variables reaches a
password-protected Redis and runs a job.  Each test starts a Redis of its own with a password."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.agentic_iqa.conftest import EXAMPLE
from tests.workers.cluster import Cluster, RedisServer
from tests.workers.leaks import leaks, secret

pytestmark = [pytest.mark.slow]


def test_inspect_conf_report_and_stats_show_no_password_nor_key(
    protected_redis: RedisServer, tmp_path: Path
) -> None:
    """The database, broker and result-backend passwords, a tool cache's and an API key, all
    configured on a real worker, appear in none of what a broker client can ask it."""
    secrets = {
        "database": secret("database"),
        "broker": protected_redis.password or "",
        "backend": secret("backend"),
        "api_key": "sk-" + uuid.uuid4().hex,
    }
    protected_redis.add_user("results", secrets["backend"])
    broker = protected_redis.secure_url(0)
    cluster = Cluster(
        broker,
        f"postgresql+psycopg://agentic:{quote(secrets['database'], safe='')}@127.0.0.1:5432/test",
        tmp_path,
        {
            "AGENTIC_IQA_RESULT_BACKEND": protected_redis.secure_url(
                1, user="results", password=secrets["backend"]
            ),
            "AGENTIC_IQA_TOOL_CACHE": protected_redis.secure_url(2),
            "OPENAI_API_KEY": secrets["api_key"],
            # Nothing here reaches the database: the worker needs none to answer.
            "AGENTIC_IQA_SUPERVISOR": "false",
        },
    )
    try:
        name = cluster.start("inspected", "default")
        inspect = cluster.client.control.inspect(destination=[name], timeout=5)
        conf = inspect.conf(with_defaults=True)
        answers = {"conf": conf, "report": inspect.report(), "stats": inspect.stats()}
    finally:
        cluster.stop()
    assert set(conf) == {name}
    assert conf[name]["task_default_queue"] == "default"
    assert conf[name]["broker_url"].startswith("redis://")  # there, with its password masked
    assert "agentic_iqa" not in conf[name]
    assert "celery" in answers["report"][name]["ok"]
    for what, answer in answers.items():
        assert leaks(json.dumps(answer), secrets) == [], what
    log = "".join(path.read_text(errors="replace") for path in tmp_path.glob("inspected-*.log"))
    assert "celery@" in log or "ready" in log
    assert leaks(log, secrets) == []


def test_a_worker_configured_only_by_file_variables_runs_a_job_on_a_protected_redis(
    protected_redis: RedisServer, tmp_path: Path
) -> None:
    """Broker URL without a password, the password in AGENTIC_IQA_REDIS_PASSWORD_FILE, the
    database URL in AGENTIC_IQA_DATABASE_URL_FILE: the worker and the submitting command both
    connect and the run is answered; the password is in neither's output."""
    password_file = tmp_path / "redis-password"
    password_file.write_text(f"{protected_redis.password}\n")
    database_file = tmp_path / "database-url"
    database_file.write_text(f"sqlite:///{tmp_path / 'runs.sqlite3'}\n")
    cluster = Cluster(protected_redis.secure_url(0), "unused", tmp_path)
    del cluster.env["AGENTIC_IQA_DATABASE_URL"]
    cluster.env.update(
        {
            "AGENTIC_IQA_BROKER_URL": protected_redis.url,
            "AGENTIC_IQA_REDIS_PASSWORD_FILE": str(password_file),
            "AGENTIC_IQA_DATABASE_URL_FILE": str(database_file),
        }
    )
    try:
        cluster.start("files", "default,gpu", concurrency=2, cli=True)
        query = "Which distortion is most severe? A. Noise B. Blur C. JPEG compression"
        blurred = str(EXAMPLE.parent / "i03_blurred.png")
        result = subprocess.run(
            [sys.executable, "-m", "agentic_iqa", "assess", blurred, "-q", query, "--json"]
            + ["--distributed", "--timeout", "120"],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        cluster.stop()
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["final_answer"] == "B"
    assert (tmp_path / "runs.sqlite3").is_file()
    log = "".join(path.read_text(errors="replace") for path in tmp_path.glob("files-*.log"))
    secrets = {"broker": protected_redis.password or ""}
    assert leaks(log + result.stdout + result.stderr, secrets) == []
