"""What a job's export and report say is true of the job.

- An export names the builtin as the answerer of its items, also for a job stored before
  configurations were kept (the builtin records no VLM calls, so nothing else says so).
- ``eval report`` warns, as ``eval compare`` does, when the builtin scored images its shipped
  parameters were fitted on, and heads its table with what was scored (the VLM alone is not
  "Agent").
- ``eval report --seed`` seeds the bootstrap as ``eval compare --seed`` does.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import Job

# Left out of the README's test command (CI runs it): real tools on real photos,
# whole jobs.
pytestmark = pytest.mark.slow

runner = CliRunner()
ITEMS = 6


def _manifest(folder: Path, target: Path) -> Path:
    """The first ``ITEMS`` photos of a LIVE-C folder of the shared data, with their MOS."""
    with open(folder / "mos.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))[:ITEMS]
    with open(target, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        writer.writerows([str(folder / "images" / row["image"]), row["mos"]] for row in rows)
    return target


def _submit(*args: str) -> str:
    result = runner.invoke(app, ["eval", "submit", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[0]


def _report(job: str, *args: str) -> dict:
    result = runner.invoke(app, ["eval", "report", job, "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def jobs(
    data_dir: Path, livec_extra_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Builtin jobs on the CLI: the agent on livec-dev photos (every one of them fitted on) and
    on livec-extra photos (none), and the VLM alone on the livec-dev photos."""
    folder = tmp_path_factory.mktemp("small-truths")
    url = f"sqlite:///{folder / 'results.sqlite3'}"
    upgrade(url)
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("AGENTIC_IQA_")]:
            if name != "AGENTIC_IQA_DATA_DIR" and not name.startswith("AGENTIC_IQA_TEST_"):
                patch.delenv(name)
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        patch.setenv("AGENTIC_IQA_WEIGHTS_DIR", str(data_dir / "pyiqa-weights"))
        patch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
        patch.setenv("AGENTIC_IQA_DEVICE", "cpu")
        patch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
        dev = _manifest(data_dir / "livec-dev", folder / "dev.csv")
        extra = _manifest(livec_extra_dir, folder / "extra.csv")
        yield {
            "url": url,
            "dev": _submit(str(dev)),
            "extra": _submit(str(extra)),
            "vlm": _submit(str(dev), "--mode", "vlm"),
        }


def test_an_export_names_the_builtin_for_a_job_stored_before_configurations(jobs):
    """Such a job recorded no VLM call: the builtin answered it (the report's header says so),
    and its export says so per item instead of leaving ``answered_by`` empty."""
    with session_scope(make_engine(jobs["url"])) as session:
        session.execute(update(Job).where(Job.id == jobs["vlm"]).values(config_json=None))
    exported = runner.invoke(app, ["eval", "export", jobs["vlm"], "--format", "jsonl", "-o", "-"])
    assert exported.exit_code == 0, exported.output
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(rows) == ITEMS
    assert {row["answered_by"] for row in rows} == {"builtin/builtin-v1"}
    assert _report(jobs["vlm"], "--bootstrap", "0")["job"]["answered_by"] == {
        "builtin/builtin-v1": ITEMS
    }


def test_a_report_warns_when_the_builtin_scored_images_it_was_fitted_on(jobs):
    """The rule and words of ``eval compare``: livec-dev photos are in the builtin's fitted
    list, livec-extra photos are not."""
    warning = (
        f"{ITEMS} of {ITEMS} items of job {jobs['dev'][:8]} are images the builtin "
        "backend was fitted on: its figures on them are in-sample"
    )
    assert warning in _report(jobs["dev"], "--bootstrap", "0")["job"]["warnings"]
    text = runner.invoke(app, ["eval", "report", jobs["dev"], "--bootstrap", "0"]).stdout
    assert f"Warning:    {warning}" in text
    compared = json.loads(
        runner.invoke(
            app, ["eval", "compare", jobs["dev"], jobs["extra"], "--json", "--bootstrap", "0"]
        ).stdout
    )
    assert warning in compared["warnings"]
    assert not any(
        "in-sample" in w for w in _report(jobs["extra"], "--bootstrap", "0")["job"]["warnings"]
    )


def test_a_report_is_headed_with_what_was_scored(jobs, tmp_path):
    vlm = runner.invoke(app, ["eval", "report", jobs["vlm"], "--bootstrap", "0"]).stdout
    assert f"VLM vs MOS (n={ITEMS}):" in vlm and "Agent vs MOS" not in vlm
    agent = runner.invoke(app, ["eval", "report", jobs["dev"], "--bootstrap", "0"]).stdout
    assert f"Agent vs MOS (n={ITEMS}):" in agent
    page = tmp_path / "vlm.html"
    runner.invoke(app, ["eval", "report", jobs["vlm"], "--bootstrap", "0", "--html", str(page)])
    assert '<tr class="agent"><td class="text">vlm</td>' in page.read_text(encoding="utf-8")


def test_report_seed_seeds_the_bootstrap_as_compare_does(jobs):
    def intervals(seed: str) -> tuple:
        report = _report(jobs["dev"], "--bootstrap", "200", "--seed", seed)
        assert report["bootstrap"]["seed"] == int(seed)
        return tuple(tuple(report["agent"][f"{name}_ci"]) for name in ("srcc", "plcc", "krcc"))

    assert intervals("3") == intervals("3")
    assert intervals("3") != intervals("4")
    default = _report(jobs["dev"], "--bootstrap", "200")
    assert tuple(
        tuple(default["agent"][f"{name}_ci"]) for name in ("srcc", "plcc", "krcc")
    ) == intervals("0")
