"""Hostile conditions at the command line: a server echoing secrets, a credential in a base URL,
terminal escape sequences in names, infrastructure that is down, and two resumes at once."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.conftest import REPO

runner = CliRunner()

QUERY_KEY = "QKEY-hostile-31337"
PASSWORD = "pw-hostile-4242"
KEY = "sk-hostile-key-0001"


class _EchoHandler(BaseHTTPRequestHandler):
    """Lists one model on GET; refuses every POST quoting its path and Authorization."""

    protocol_version = "HTTP/1.1"
    paths: list[str] = []

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self.paths.append(self.path)
        self._send(
            200,
            {
                "object": "list",
                "data": [{"id": "gpt-4o", "object": "model", "created": 0, "owned_by": "x"}],
            },
        )

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.paths.append(self.path)
        self._send(
            401,
            {
                "error": {
                    "type": "auth",
                    "message": (
                        f"denied {self.path} with Authorization: "
                        f"{self.headers.get('authorization')}"
                    ),
                }
            },
        )

    def log_message(self, *_: Any) -> None:
        """Quiet."""


@pytest.fixture
def echo_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    thread = Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    _EchoHandler.paths = []
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _manifest(folder: Path, name: str = "i03_blurred.png") -> Path:
    image = folder / name
    image.write_bytes((REPO / "examples/i03_blurred.png").read_bytes())
    manifest = folder / "m.jsonl"
    manifest.write_text(json.dumps({"image": name}) + "\n")
    return manifest


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.sqlite3'}",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "COLUMNS": "300",
        "OPENAI_API_KEY": KEY,
        "AGENTIC_IQA_BROKER_URL": "",
    }
    env.update(extra)
    return env


# -- 2. secrets echoed by a server; a credential in the base URL ----------------------------------


def test_echoed_secrets_reach_no_column_and_no_output_and_the_key_goes_in_the_query(
    tmp_path: Path, echo_server: str
) -> None:
    manifest = _manifest(tmp_path)
    base = f"http://user:{PASSWORD}@{echo_server}/v1?key={QUERY_KEY}"
    result = runner.invoke(
        app,
        [
            "eval",
            "submit",
            str(manifest),
            "--backend",
            "openai",
            "--model",
            "gpt-4o",
            "--base-url",
            base,
        ],
        env=_env(tmp_path),
    )
    assert result.exit_code == 1, result.output  # every item failed: run, not refused
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"/v1/chat/completions?key={QUERY_KEY}" in _EchoHandler.paths
    assert "denied /v1/chat/completions?key=***" in result.output
    raw = (tmp_path / "r.sqlite3").read_bytes()
    import base64

    basic = base64.b64encode(f"user:{PASSWORD}".encode())
    for secret in (QUERY_KEY.encode(), PASSWORD.encode(), basic, KEY.encode()):
        assert secret not in raw
        assert secret.decode() not in result.output
    with sqlite3.connect(tmp_path / "r.sqlite3") as db:
        assert db.execute("select status from jobs").fetchall() == [("done",)]


def test_a_base_url_the_sdk_cannot_use_is_one_line_and_stores_nothing(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    for base in ("ftp://h/v1?key=abcdef123", "http://h:99999/v1?key=abcdef123"):
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                str(manifest),
                "--backend",
                "openai",
                "--model",
                "gpt-4o",
                "--base-url",
                base,
            ],
            env=_env(tmp_path),
        )
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
        assert "base_url" in result.output and "abcdef123" not in result.output
    assert not (tmp_path / "r.sqlite3").exists() or sqlite3.connect(tmp_path / "r.sqlite3").execute(
        "select count(*) from jobs"
    ).fetchone() == (0,)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- 6. terminal escape sequences in names, queries and images ------------------------------------

ESC_IMAGE = "x\x1b[31mred.png"
ESC_NAME = "job\x1b]0;pwned\x07\x1b[5m\r"
ESC_QUERY = "Rate\x1b[2J this \u202eimage"


def test_control_characters_are_escaped_in_every_human_output_and_kept_in_json(
    tmp_path: Path,
) -> None:
    image = tmp_path / ESC_IMAGE
    image.write_bytes((REPO / "examples/i03_blurred.png").read_bytes())
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"image": ESC_IMAGE, "query": ESC_QUERY, "mos": 3}) + "\n")
    env = _env(tmp_path)
    submitted = runner.invoke(app, ["eval", "submit", str(manifest), "--name", ESC_NAME], env=env)
    assert submitted.exit_code == 0, submitted.output
    job = submitted.stdout.strip().splitlines()[0]
    run = json.loads(runner.invoke(app, ["runs", "list", "--json"], env=env).stdout)[0]["id"]
    other = runner.invoke(app, ["eval", "submit", str(manifest), "--name", "second"], env=env)
    outputs = {"submit": submitted.output}
    for args in (
        ["eval", "status", job],
        ["eval", "report", job, "--bootstrap", "0"],
        ["runs", "list"],
        ["runs", "list", "--job", job],
        ["runs", "show", run],
        ["eval", "compare", job, other.stdout.strip().splitlines()[0], "--bootstrap", "0"],
    ):
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == 0, (args, result.output)
        outputs[" ".join(args[:2])] = result.output
    for where, text in outputs.items():
        assert "\x1b" not in text and "\r" not in text and "\u202e" not in text, where
    assert "job\\x1b]0;pwned\\x1b[5m" in outputs["submit"]
    assert "x\\x1b[31mred.png" in outputs["runs show"]
    status = json.loads(runner.invoke(app, ["eval", "status", job, "--json"], env=env).stdout)
    assert status["name"] == ESC_NAME  # JSON keeps the value as it is


# -- 5. infrastructure faults: one line, exit 2, the traceback behind --debug ----------------------

COMMANDS = [
    ["eval", "status"],
    ["eval", "report"],
    ["eval", "export", "--format", "csv"],
    ["runs", "list"],
    ["runs", "show", "abc"],
    ["eval", "resume"],
    ["eval", "cancel", "abc"],
    ["eval", "compare", "a", "b"],
    ["db", "upgrade"],
    ["eval", "submit", "MANIFEST"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_an_unreachable_database_is_one_line_and_exit_2_in_every_command(
    tmp_path: Path, args: list[str]
) -> None:
    manifest = _manifest(tmp_path)
    args = [str(manifest) if a == "MANIFEST" else a for a in args]
    url = f"postgresql+psycopg://iqa:s3cr3t@127.0.0.1:{_closed_port()}/results"
    env = _env(tmp_path, AGENTIC_IQA_DATABASE_URL=url, AGENTIC_IQA_LOG_DIR=str(tmp_path))
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "127.0.0.1" in lines[0] and "AGENTIC_IQA_DATABASE_URL" in lines[0]
    assert "s3cr3t" not in result.output and "Traceback" not in result.output
    debug = runner.invoke(app, ["--debug", *args], env=env)
    assert debug.exit_code == 2 and "Traceback" in debug.output and "s3cr3t" not in debug.output


def test_a_full_disk_under_sqlite_is_one_line_saying_free_space(tmp_path: Path) -> None:
    """SQLite on a filesystem with no room left (a small tmpfs, when this host can mount one)."""
    import subprocess

    mount = tmp_path / "full"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        manifest = _manifest(tmp_path)
        env = _env(
            tmp_path,
            AGENTIC_IQA_DATABASE_URL=f"sqlite:///{mount / 'r.sqlite3'}",
            AGENTIC_IQA_LOG_DIR=str(tmp_path),
        )
        with open(mount / "filler", "wb", buffering=0) as filler:  # fill it to the last block
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError:
                pass
        for args in (["db", "upgrade"], ["eval", "submit", str(manifest)], ["eval", "status"]):
            result = runner.invoke(app, args, env=env)
            assert result.exit_code == 2, (args, result.output)
            assert len(result.output.strip().splitlines()) == 1, result.output
            assert "full" in result.output or "refused the job" in result.output, result.output
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)  # lazy: the engine may hold it


@pytest.mark.parametrize("broker", ["redis://baduser:wrongpw@127.0.0.1:6379/0"])
def test_a_broker_refusing_its_credentials_is_one_line_in_submit_and_resume(
    tmp_path: Path, broker: str
) -> None:
    import redis

    try:
        redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_connect_timeout=2).ping()
    except redis.RedisError:
        pytest.skip("no Redis at 127.0.0.1:6379")
    manifest = _manifest(tmp_path)
    assert runner.invoke(app, ["eval", "submit", str(manifest)], env=_env(tmp_path)).exit_code == 0
    env = _env(tmp_path, AGENTIC_IQA_BROKER_URL=broker, AGENTIC_IQA_LOG_DIR=str(tmp_path))
    for args in (["eval", "submit", str(manifest)], ["eval", "resume"]):
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
        assert "refused its credentials" in result.output and "wrongpw" not in result.output


# -- 7. small ones ---------------------------------------------------------------------------------


def _finished_job(tmp_path: Path) -> tuple[dict[str, str], str]:
    manifest = _manifest(tmp_path)
    env = _env(tmp_path)
    result = runner.invoke(app, ["eval", "submit", str(manifest)], env=env)
    assert result.exit_code == 0, result.output
    return env, result.stdout.strip().splitlines()[0]


def test_a_second_resume_beside_a_running_one_says_so_and_exits_1(tmp_path: Path) -> None:
    env, job = _finished_job(tmp_path)
    with sqlite3.connect(tmp_path / "r.sqlite3") as db:  # as another resume leaves it mid-way
        db.execute("update jobs set status='running', finished_at=null")
        db.execute("update job_items set status='queued'")
        db.execute("update runs set status='running', lease_until=datetime('now', '+300 seconds')")
    result = runner.invoke(app, ["eval", "resume", job[:8]], env=env)
    assert result.exit_code == 1, result.output
    assert "being run by another process" in result.output
    assert f"agentic-iqa eval status {job[:8]} --watch" in result.output


def test_an_orphaned_job_never_dispatched_shows_as_stalled_with_the_resume_command(
    tmp_path: Path,
) -> None:
    env, job = _finished_job(tmp_path)
    with sqlite3.connect(tmp_path / "r.sqlite3") as db:  # its process died before dispatching
        db.execute(
            "update jobs set status='running', finished_at=null, dispatch='workers', "
            "created_at='2020-01-01 00:00:00'"
        )
        db.execute("update job_items set status='pending', run_id=null")
        # Items moved behind the product's back: its stored counts say "not counted yet".
        db.execute(
            "update jobs set items_pending=null, items_queued=null, items_done=null, "
            "items_failed=null, items_cancelled=null"
        )
        db.execute("delete from step_records")
        db.execute("delete from runs")
    result = runner.invoke(app, ["eval", "status", job[:8]], env=env)
    assert result.exit_code == 0, result.output
    assert f"job {job} (m.jsonl): stalled" in result.output
    assert f"agentic-iqa eval resume {job[:8]}" in result.output
    assert "ETA" not in result.output


def test_the_stalled_note_names_the_resume_command() -> None:
    from datetime import UTC, datetime

    from agentic_iqa.cli.eval import _pace
    from agentic_iqa.runtime.lifecycle import Progress

    current = Progress("0123456789", "n", "running", {"queued": 3}, datetime.now(UTC), None, 3)
    assert "`agentic-iqa eval resume 01234567`" in _pace(current)


@pytest.mark.slow
def test_a_job_stopped_by_a_full_disk_says_so_and_resumes_once_space_is_freed(
    tmp_path: Path,
) -> None:
    """SQLite on a 1 MB tmpfs: the job fills it mid-way (when this host can mount one)."""
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        photo = (REPO / "examples/i03_blurred.png").read_bytes()
        for index in range(30):
            (tmp_path / f"p{index:02d}.png").write_bytes(photo)
        manifest = tmp_path / "m.csv"
        manifest.write_text("image\n" + "".join(f"p{i:02d}.png\n" for i in range(30)))
        env = _env(
            tmp_path,
            AGENTIC_IQA_DATABASE_URL=f"sqlite:///{mount / 'r.sqlite3'}",
            AGENTIC_IQA_LOG_DIR=str(tmp_path),
        )
        submitted = runner.invoke(app, ["eval", "submit", str(manifest)], env=env)
        assert submitted.exit_code == 2, submitted.output
        assert "Traceback" not in submitted.output
        (line,) = [text for text in submitted.output.splitlines() if text.startswith("error:")]
        job = submitted.stdout.strip().splitlines()[0]
        assert f"job {job[:8]} stopped: the disk holding the results database is full" in line
        assert f"`agentic-iqa eval resume {job[:8]}`" in line
        status = runner.invoke(app, ["eval", "status", job], env=env)
        assert "interrupted (disk full)" in status.output and "ETA" not in status.output
        subprocess.run(["mount", "-o", "remount,size=16m", str(mount)], check=True)
        resumed = runner.invoke(app, ["eval", "resume", job], env=env)
        assert resumed.exit_code == 0, resumed.output
        assert "30 done, 0 failed of 30 items" in resumed.output
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


#: Every command of COMMANDS (and the rest of a job's life) on a full disk: whether it only
#: reads (it must keep working, as on any disk) and what its output must then hold.  JOB and
#: JOB2 are two finished jobs, JOB8 the first one's short id, RUN a run of it; STOPPED is a job
#: whose process died mid-way (still "running"), which cancel and resume must write to.
FULL_DISK = [
    (["eval", "status", "JOB"], "read", "1/1 finished"),
    (["eval", "status"], "read", "JOB2"),
    (["eval", "report", "JOB"], "read", "JOB"),
    (["eval", "export", "JOB", "--format", "csv", "--output", "-"], "read", "i03_blurred.png"),
    (["eval", "export", "JOB", "--format", "csv", "--output", "FULL/out.csv"], "write", "out.csv"),
    (["runs", "list"], "read", "i03_blurred.png"),
    (["runs", "show", "RUN"], "read", "RUN"),
    (["eval", "compare", "JOB", "JOB2", "--bootstrap", "0"], "read", "JOB8"),
    (["eval", "cancel", "JOB"], "finished", "already finished (done)"),
    (["eval", "cancel", "STOPPED"], "write", None),
    (["eval", "resume", "JOB"], "write", None),
    (["eval", "resume", "STOPPED"], "write", None),
    (["db", "upgrade"], "read", "up to date"),
    (["eval", "submit", "MANIFEST"], "write", None),
]


def _fill(folder: Path) -> None:
    """Write zeros into ``folder`` until its filesystem refuses the next block."""
    with open(folder / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:
            pass
        try:  # the last partial block
            while True:
                filler.write(b"\0")
        except OSError:
            pass


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two finished jobs and a stopped one in a SQLite database on a 2 MB tmpfs, which is
    then filled."""
    import subprocess

    from agentic_iqa.db.engine import dispose_engines

    tmp_path = tmp_path_factory.mktemp("fulldisk")
    mount = tmp_path / "full"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        manifest = _manifest(tmp_path)
        env = _env(
            tmp_path,
            AGENTIC_IQA_DATABASE_URL=f"sqlite:///{mount / 'r.sqlite3'}",
            AGENTIC_IQA_LOG_DIR=str(tmp_path),
        )
        jobs = []
        for _ in range(3):
            result = runner.invoke(app, ["eval", "submit", str(manifest)], env=env)
            assert result.exit_code == 0, result.output
            jobs.append(result.stdout.strip().splitlines()[0])
        listed = runner.invoke(app, ["runs", "list", "--json", "--job", jobs[0]], env=env)
        run = json.loads(listed.stdout)[0]["id"]
        with sqlite3.connect(mount / "r.sqlite3") as db:  # the oldest, its process gone
            db.execute(
                "update jobs set status='running', finished_at=null, "
                "created_at='2020-01-01 00:00:00' where id=?",
                (jobs[2],),
            )
            db.execute("update job_items set status='queued' where job_id=?", (jobs[2],))
        db.close()
        dispose_engines()  # nothing held open: the WAL is checkpointed into the file
        _fill(mount)
        yield {
            "env": env,
            "manifest": manifest,
            "job": jobs[0],
            "job2": jobs[1],
            "stopped": jobs[2],
            "run": run,
            "mount": mount,
        }
    finally:
        dispose_engines()
        subprocess.run(["umount", "-l", str(mount)], check=False)  # lazy: an engine may hold it


@pytest.mark.parametrize(
    ("args", "kind", "expected"), FULL_DISK, ids=[" ".join(a) for a, _, _ in FULL_DISK]
)
@pytest.mark.slow
def test_every_command_on_a_full_disk_reads_as_usual_or_is_one_line_saying_free_space(
    full_disk: dict[str, Any], args: list[str], kind: str, expected: str | None
) -> None:
    """Reads keep working on a full disk; a write (a new job, a resume, a file on the full
    disk) is one line saying the disk is full and what to do; never a traceback or an ETA."""
    from agentic_iqa.db.engine import dispose_engines

    names = {
        "JOB": full_disk["job"],
        "JOB2": full_disk["job2"],
        "RUN": full_disk["run"],
        "JOB8": full_disk["job"][:8],
        "STOPPED": full_disk["stopped"],
        "MANIFEST": str(full_disk["manifest"]),
    }
    args = [names.get(a) or a.replace("FULL", str(full_disk["mount"])) for a in args]
    dispose_engines()  # as in a new process: no connection left open by the command before
    result = runner.invoke(app, args, env=full_disk["env"])
    assert "Traceback" not in result.output and "ETA" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    if kind == "write":
        assert result.exit_code == 2, result.output
        (line,) = result.output.strip().splitlines()
        assert " full" in line and "free some space" in line, line
        assert expected is None or expected in line, line
        assert not (full_disk["mount"] / "out.csv").exists()  # nor a part of one
        dispose_engines()
        debug = runner.invoke(app, ["--debug", *args], env=full_disk["env"])
        assert debug.exit_code == 2 and "Traceback" in debug.output, debug.output
        return
    assert result.exit_code == (1 if kind == "finished" else 0), result.output
    assert names.get(expected or "", expected) in result.output, result.output


def test_the_full_disk_check_covers_every_command_of_the_unreachable_database_check() -> None:
    assert {tuple(a[:2]) for a in COMMANDS} <= {tuple(a[:2]) for a, _, _ in FULL_DISK}
