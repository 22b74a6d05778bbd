"""What a tracker is given: a missing library is one line naming the extra, before any work;
the params of a job run on a server keep no password or key; the metrics are the report's own
figures and none it has not."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from agentic_iqa.db.engine import make_engine, read_scope
from agentic_iqa.db.models import Job
from agentic_iqa.trackers import TrackerError, TrackerMissing, log_report, require
from agentic_iqa.trackers.record import headline, metrics, params, tags
from tests.agentic_iqa.trackers.conftest import SECRET, cli, report_json


def jobs_stored() -> int:
    with read_scope(make_engine(os.environ["AGENTIC_IQA_DATABASE_URL"])) as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)


@pytest.mark.parametrize(("flag", "module"), [("--mlflow", "mlflow"), ("--wandb", "wandb")])
def test_a_missing_library_names_its_extra_before_any_work(
    metric_job: str, trackers_env: dict[str, Path], monkeypatch, flag: str, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import mlflow` fails as if not installed
    with pytest.raises(TrackerMissing) as missing:
        require(module)
    assert missing.value.extra == module
    result = cli("eval", "report", metric_job, flag, "somewhere", code=2)
    said = " ".join(result.output.split())
    assert f"pip install 'agentic-iqa[{module}]'" in said and "Traceback" not in said
    before = jobs_stored()
    manifest = trackers_env["folder"] / "piqe.csv"
    result = cli("eval", "submit", str(manifest), "--tools", "PIQE", flag, "somewhere", code=2)
    assert f"agentic-iqa[{module}]" in " ".join(result.output.split())
    assert jobs_stored() == before  # refused before the job was stored


def test_an_unknown_tracker_is_refused(metric_job: str) -> None:
    with pytest.raises(TrackerError, match="unknown tracker 'neptune'"):
        log_report("neptune", "x", report_json(metric_job), [])


def test_no_password_or_key_of_a_servers_url_is_a_param(metric_job: str) -> None:
    """A job run on a server whose base URL carries a password and a key in its query."""
    document = copy.deepcopy(report_json(metric_job))
    role = {
        "backend": "openai",
        "model": "gpt-5-mini",
        "base_url": "https://user:hunter2-password@llm.example/v1?api-key=" + SECRET,
        "temperature": 0.0,
        "follow_up": "once",
    }
    document["job"]["configuration"]["roles"] = {"planner": role, "summarizer": dict(role)}
    document["job"]["manifest"] = "s3://bucket/m.csv?X-Amz-Signature=abcdef123456"
    found = params(document)
    text = repr(found) + repr(tags(document))
    for secret in ("hunter2-password", SECRET, "abcdef123456"):
        assert secret not in text
    assert found["planner/base_url"].startswith("https://***@llm.example/v1")
    assert found["planner/model"] == "gpt-5-mini" and found["summarizer/follow_up"] == "once"
    assert found["manifest"].startswith("s3://bucket/m.csv")


def test_the_metrics_are_the_reports_figures_and_none_it_has_not(metric_job: str) -> None:
    document = report_json(metric_job)
    (piqe,) = document["tools"]
    assert headline(document) is piqe  # a metric job of one tool
    two = copy.deepcopy(document)
    other = {**copy.deepcopy(piqe), "tool": "MS-SSIM (v2)", "srcc": None, "srcc_ci": None}
    two["tools"].append(other)
    assert headline(two) is None  # several tools: none is the job's
    found = metrics(two)
    assert "srcc" not in found and found["tool/PIQE/srcc"] == piqe["srcc"]
    assert "tool/MS-SSIM _v2_/srcc" not in found  # None: not logged
    assert "tool/MS-SSIM _v2_/srcc_ci_low" not in found
    assert found["tool/MS-SSIM _v2_/plcc"] == piqe["plcc"]
    assert all(isinstance(value, float) for value in found.values())
