"""The command line starts fast: heavy modules load only in the commands that use them.

Each command runs in a fresh interpreter, which then reports what is in ``sys.modules``: module
names, not times (timings are flaky under load; ``benchmarks/cli_startup.py`` measures them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Never needed to print help, list the tools or show a job's progress.
HEAVY = (
    "torch",
    "torchvision",
    "pyiqa",
    "scipy",
    "matplotlib",
    "pyarrow",
    "celery",
    "kombu",
    "openai",
    "anthropic",
)

#: Runs the CLI in this interpreter (as the console script does), then reports the top-level
#: packages loaded and the exit code on stderr's last line.
PROBE = """
import json, sys
from agentic_iqa.cli import app
code = 0
try:
    app(args=sys.argv[1:], prog_name="agentic-iqa")
except SystemExit as exc:
    code = exc.code or 0
loaded = sorted({name.split(".")[0] for name in sys.modules} | set(sys.modules))
print(json.dumps({"code": code, "modules": loaded}), file=sys.stderr)
"""


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, set[str], str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"]), result.stdout


def _heavy(modules: set[str], extra: tuple[str, ...] = ()) -> list[str]:
    return sorted(name for name in (*HEAVY, *extra) if name in modules)


def test_help_loads_no_heavy_module() -> None:
    code, modules, stdout = _run(["--help"])
    assert code == 0 and "assess" in stdout
    # Help needs neither the database layer nor the pixels.
    assert _heavy(modules, ("numpy", "PIL", "sqlalchemy", "alembic", "redis")) == []


def test_tools_list_loads_no_heavy_module() -> None:
    code, modules, stdout = _run(["tools", "list", "--json"])
    assert code == 0 and json.loads(stdout)
    assert _heavy(modules, ("numpy", "PIL", "sqlalchemy", "alembic")) == []


@pytest.fixture
def one_job(tmp_path: Path) -> str:
    """A migrated SQLite database holding one submitted job of two items."""
    from agentic_iqa.db import dispose_engines, make_engine, upgrade
    from agentic_iqa.jobs.spec import JobSpec
    from agentic_iqa.runtime import lifecycle

    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    upgrade(url)
    manifest = tmp_path / "manifest.jsonl"
    image = REPO / "examples" / "i03_blurred.png"
    manifest.write_text(
        f'{{"image": "{image}", "id": "a"}}\n{{"image": "{image}", "id": "b"}}\n', encoding="utf-8"
    )
    lifecycle.submit(
        make_engine(url), JobSpec.build(manifest=manifest, name="startup", check_images=False)
    )
    dispose_engines(url)
    return url


def test_eval_status_loads_no_heavy_module(one_job: str) -> None:
    code, modules, stdout = _run(
        ["eval", "status", "--json"], {"AGENTIC_IQA_DATABASE_URL": one_job}
    )
    assert code == 0 and json.loads(stdout)["total"] == 2
    # The database is at head: the schema check is one query, not Alembic's machinery.
    assert _heavy(modules, ("alembic",)) == []


# -- the schema check behind every command that opens the database --------------------------------


def test_script_heads_agree_with_alembic() -> None:
    from alembic.script import ScriptDirectory

    from agentic_iqa.db.engine import alembic_config, script_heads

    assert script_heads() == set(ScriptDirectory.from_config(alembic_config()).get_heads())


def test_ensure_schema_migrates_only_when_not_at_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alembic import command

    from agentic_iqa.db import engine as db_engine

    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    engine = db_engine.build_engine(url)
    real_upgrade = db_engine.upgrade
    calls: list[str] = []

    def counting_upgrade(target: str | None = None, revision: str = "head") -> None:
        calls.append(revision)
        real_upgrade(target, revision)

    monkeypatch.setattr(db_engine, "upgrade", counting_upgrade)
    db_engine.ensure_schema(engine)  # a new file: migrated
    assert calls == ["head"] and db_engine._at_head(engine)
    db_engine.ensure_schema(engine)  # at head: nothing to do
    assert calls == ["head"]

    command.downgrade(db_engine.alembic_config(url), "0003")  # an older database
    assert not db_engine._at_head(engine)
    db_engine.ensure_schema(engine)
    assert calls == ["head", "head"] and db_engine._at_head(engine)
    engine.dispose()
