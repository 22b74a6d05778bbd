"""A job runs what it says, and says when it cannot answer its questions.

- ``--model gpt-4o`` without ``--backend`` takes the backend from an unambiguous model name
  (said on stderr) or stops the command (exit 2); a report, export or comparison names only a
  model that answered, for old jobs too.
- A Q-Bench job with ``--mode tools`` (no answer to grade) is refused at submit, and a mixed
  manifest's report says accuracy is not applicable.
- Q-Bench's test split, whose answers are withheld: every report (text, JSON, HTML,
  ``eval compare``) says "answers withheld" instead of an accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import Job, VlmCall
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.reports.report import NOT_APPLICABLE
from agentic_iqa.runconfig import capture
from agentic_iqa.runtime.local import run_local
from agentic_iqa.runtime.submission import submit
from agentic_iqa.vlm.settings import ROLES, BackendConfig, backend_of_model
from tests.agentic_iqa.conftest import graded_photos, write_csv
from tests.conformance.harness import simulated
from tests.conformance.items import images, multiple_choice, scoring, write_manifest
from tests.conformance.simulated_model import Behaviour

runner = CliRunner()


def _jobs(url: str) -> int:
    if not Path(url.removeprefix("sqlite:///")).exists():
        return 0
    with session_scope(make_engine(url)) as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)


def _job_id(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[0]


# -- a job runs what it says ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "backend"),
    [
        ("gpt-4o", "openai"),
        ("gpt-4o-mini", "openai"),
        ("chatgpt-4o-latest", "openai"),
        ("o1", "openai"),
        ("o3-mini", "openai"),
        ("o4-mini", "openai"),
        ("claude-sonnet-4-5", "anthropic"),
        ("claude-3-5-haiku-latest", "anthropic"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", None),
        ("llava", None),
        ("omni-vl", None),
        ("sim-vl", None),
    ],
)
def test_only_an_unambiguous_model_name_names_its_backend(model, backend):
    assert backend_of_model(model) == backend


def test_model_without_backend_runs_on_the_backend_its_name_names_and_the_report_says_so(
    tmp_path, results, monkeypatch
):
    """`eval submit m.csv --model gpt-4o` (an OpenAI-compatible server standing in for
    OpenAI): one note on stderr, every item answered by openai/gpt-4o, and the report says
    that model, never the builtin."""
    paths = images(tmp_path / "images", 4)
    items = multiple_choice(paths, 3, seed=4) + scoring(paths, 1, seed=4)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-key")
    with simulated(Behaviour.CLEAN, items) as (server, _model):
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                str(write_manifest(items, tmp_path / "m.csv")),
                "--model",
                "gpt-4o",
                "--base-url",
                f"{server.url}/v1",
            ],
        )
        job_id = _job_id(result)
    assert (
        "note: --model gpt-4o without --backend: using the openai backend (from the model's name)"
    ) in " ".join(result.stderr.split())
    with session_scope(make_engine(results)) as session:
        answered = set(session.execute(select(VlmCall.backend, VlmCall.model)).all())
    assert answered == {("openai", "gpt-4o")}
    report = json.loads(
        runner.invoke(app, ["eval", "report", job_id, "--json", "--bootstrap", "0"]).stdout
    )
    assert (report["job"]["backend"], report["job"]["model"]) == ("openai", "gpt-4o")
    assert report["job"]["answered_by"] == {"openai/gpt-4o": len(items)}
    assert report["job"]["warnings"] == []


@pytest.mark.parametrize(("flag", "expected"), [([], True), (["--no-follow-up"], False)])
def test_no_follow_up_is_stored_with_the_job_and_its_items_ask_none(
    tmp_path, results, monkeypatch, flag, expected
):
    """``eval submit --no-follow-up``: the job's configuration says so (every process that runs
    its items honours it), and a model whose replies name no option is never asked again."""
    paths = images(tmp_path / "images", 3)
    items = multiple_choice(paths, 3, seed=5)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-key")
    with simulated(Behaviour.VAGUE, items) as (server, model):
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                str(write_manifest(items, tmp_path / "m.csv")),
                "--backend",
                "openai",
                "--model",
                "sim-vl",
                "--base-url",
                f"{server.url}/v1",
                *flag,
            ],
        )
        job_id = _job_id(result)
        asked = model.calls.get("follow_up", 0)
    with session_scope(make_engine(results)) as session:
        stored = json.loads(session.get(Job, job_id).config_json)
    assert {role: c["follow_up"] for role, c in stored["roles"].items()} == {
        role: (None if expected else False) for role in ROLES
    }
    assert asked == (len(items) if expected else 0)
    report = json.loads(
        runner.invoke(app, ["eval", "report", job_id, "--json", "--bootstrap", "0"]).stdout
    )
    assert report["mcq"]["accuracy"] == (1.0 if expected else 0.0)
    assert report["vlm"]["follow_ups"]["calls"] == asked  # counted, and priced apart
    text = runner.invoke(app, ["eval", "report", job_id, "--bootstrap", "0"]).stdout
    said = f"{asked} of the calls were follow-up questions"
    assert (said in " ".join(text.split())) is expected


@pytest.mark.parametrize(
    ("args", "environment", "message"),
    [
        (
            ["--model", "Qwen/Qwen2.5-VL-7B-Instruct"],
            {},
            "--model Qwen/Qwen2.5-VL-7B-Instruct names no backend, and the builtin backend runs no "
            "model: add --backend openai",
        ),
        (
            ["--backend", "builtin", "--model", "gpt-4o"],
            {},
            "--model gpt-4o with the builtin backend (--backend builtin)",
        ),
        (
            ["--model", "gpt-4o"],
            {"AGENTIC_IQA_VLM_BACKEND": "builtin"},
            "--model gpt-4o with the builtin backend (AGENTIC_IQA_VLM_BACKEND=builtin)",
        ),
        ([], {"AGENTIC_IQA_VLM_MODEL": "llava"}, "AGENTIC_IQA_VLM_MODEL=llava names no backend"),
    ],
)
def test_a_model_no_backend_can_be_told_for_stops_submit_and_assess_before_anything_is_stored(
    tmp_path, results, monkeypatch, args, environment, message
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    path = write_csv(tmp_path / "m.csv", ["image", "mos"], [["p0.png", 50]])
    graded_photos(tmp_path, 1)
    for command in (
        ["eval", "submit", str(path)],
        ["assess", str(tmp_path / "p0.png")],
        ["eval", "estimate", str(path)],
    ):
        result = runner.invoke(app, [*command, *args])
        assert result.exit_code == 2, (command, result.output)
        assert message in " ".join(result.output.split()), (command, result.output)
    assert _jobs(results) == 0


def test_an_inferred_backend_still_needs_its_key_and_says_which(tmp_path, results, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    graded_photos(tmp_path, 1)
    result = runner.invoke(
        app, ["assess", str(tmp_path / "p0.png"), "--model", "claude-sonnet-4-5"]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "note: --model claude-sonnet-4-5 without --backend: using the anthropic backend (from "
        "the model's name)",
        "error: anthropic backend: the API key variable ANTHROPIC_API_KEY is not set (or empty)",
    ]


def test_a_job_stored_by_the_old_bug_is_reported_with_the_model_that_answered(
    tmp_path,
    results,
    agents,
):
    """Backend builtin, model gpt-4o stored (what `--model gpt-4o` without `--backend` did):
    the header, configuration, export and comparison name builtin-v1, never gpt-4o, and a
    warning says that no model answered."""
    names = graded_photos(tmp_path, 3)
    path = write_csv(
        tmp_path / "m.csv",
        ["image", "mos"],
        [[name, 70 - 20 * index] for index, name in enumerate(names)],
    )
    upgrade(results)
    engine = make_engine(results)
    roles = {role: BackendConfig(backend="builtin", model="gpt-4o") for role in ROLES}
    jobs = []
    for _ in range(2):
        config = capture(max_replan_iterations=2, vlm_cache=False, roles=roles)
        jobs.append(submit(engine, JobSpec.build(manifest=path, config=config)))
        run_local(engine, jobs[-1], agents, workers=1)
    report = runner.invoke(app, ["eval", "report", jobs[0], "--json", "--bootstrap", "0"])
    document = json.loads(report.stdout)
    assert (document["job"]["backend"], document["job"]["model"]) == ("builtin", "builtin-v1")
    assert document["job"]["answered_by"] == {"builtin/builtin-v1": 3}
    assert {role["model"] for role in document["job"]["configuration"]["roles"].values()} == {
        "builtin-v1"
    }
    assert any("no model did" in warning for warning in document["job"]["warnings"])
    text = runner.invoke(app, ["eval", "report", jobs[0], "--bootstrap", "0"]).stdout
    assert "Model:      builtin-v1" in text and "builtin/builtin-v1 (3 items)" in text
    page = tmp_path / "report.html"
    runner.invoke(app, ["eval", "report", jobs[0], "--html", str(page), "--bootstrap", "0"])
    exported = runner.invoke(app, ["eval", "export", jobs[0], "--format", "jsonl", "-o", "-"])
    assert {json.loads(line)["answered_by"] for line in exported.stdout.splitlines()} == {
        "builtin/builtin-v1"
    }
    compared = runner.invoke(app, ["eval", "compare", *jobs, "--bootstrap", "0"])
    compared_json = runner.invoke(app, ["eval", "compare", *jobs, "--json", "--bootstrap", "0"])
    assert {job["model"] for job in json.loads(compared_json.stdout)["jobs"]} == {"builtin-v1"}
    for output in (
        report.stdout,
        text,
        page.read_text(encoding="utf-8"),
        exported.stdout,
        compared.stdout,
        compared_json.stdout,
    ):
        assert "gpt-4o" not in output


# -- questions a metric job cannot answer -----------------------------------------------------


def _qbench(root: Path, split: str, *, answers: bool) -> Path:
    names = graded_photos(root / "images", 3)
    questions = []
    for name in names:
        for question, candidates, right in (
            ("Is this image blurry?", ["Yes", "No"], "Yes"),
            ("How is the sharpness of the image?", ["Good", "Fair", "Poor"], "Poor"),
        ):
            record = {
                "img_path": name,
                "question": question,
                "candidates": candidates,
                "type": 0,
                "concern": 0,
            }
            if answers:
                record["correct_ans"] = right
            questions.append(record)
    (root / f"llvisionqa_{split}.json").write_text(json.dumps(questions))
    return root


def test_a_tools_job_on_questions_only_is_refused_at_submit(tmp_path, results):
    root = _qbench(tmp_path / "LLVisionQA", "dev", answers=True)
    result = runner.invoke(
        app,
        [
            "eval",
            "submit",
            "--dataset",
            "qbench",
            "--root",
            str(root),
            "--mode",
            "tools",
            "--tools",
            "PIQE",
        ],
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--mode tools gives scores, not answers: all 6 items are multiple-choice" in said
    assert "--mode agent or --mode vlm" in said
    assert _jobs(results) == 0


def test_a_tools_job_on_a_mixed_manifest_reports_accuracy_as_not_applicable(tmp_path, results):
    names = graded_photos(tmp_path, 4)
    path = write_csv(
        tmp_path / "m.csv",
        ["image", "query", "options", "answer", "mos"],
        [
            [names[0], "Is this image blurry?", "Yes|No", "No", ""],
            [names[1], "Is this image blurry?", "Yes|No", "Yes", ""],
            [names[2], "", "", "", 60],
            [names[3], "", "", "", 30],
        ],
    )
    job_id = _job_id(
        runner.invoke(app, ["eval", "submit", str(path), "--mode", "tools", "--tools", "PIQE"])
    )
    document = json.loads(
        runner.invoke(app, ["eval", "report", job_id, "--json", "--bootstrap", "0"]).stdout
    )
    assert document["mcq"]["reason"] == NOT_APPLICABLE and document["mcq"]["accuracy"] is None
    text = runner.invoke(app, ["eval", "report", job_id, "--bootstrap", "0"]).stdout
    assert f"MCQ accuracy: {NOT_APPLICABLE}" in text and "(0/2 correct)" not in text
    page = tmp_path / "r.html"
    runner.invoke(app, ["eval", "report", job_id, "--html", str(page), "--bootstrap", "0"])
    assert NOT_APPLICABLE in page.read_text(encoding="utf-8")
    agent_job = _job_id(runner.invoke(app, ["eval", "submit", str(path)]))
    compared = runner.invoke(app, ["eval", "compare", agent_job, job_id, "--bootstrap", "0"])
    assert f"tools/PIQE{' ' * 1}" in compared.stdout and NOT_APPLICABLE in compared.stdout


def test_a_split_whose_answers_are_withheld_says_so_in_every_report(tmp_path, results):
    root = _qbench(tmp_path / "LLVisionQA", "test", answers=False)
    jobs = [
        _job_id(
            runner.invoke(
                app,
                [
                    "eval",
                    "submit",
                    "--dataset",
                    "qbench",
                    "--root",
                    str(root),
                    "--split",
                    "test",
                    "--mode",
                    mode,
                ],
            )
        )
        for mode in ("agent", "vlm")
    ]
    document = json.loads(
        runner.invoke(app, ["eval", "report", jobs[0], "--json", "--bootstrap", "0"]).stdout
    )
    assert document["mcq"]["accuracy"] is None and document["mcq"]["withheld"] == 6
    assert document["mcq"]["reason"].startswith("answers withheld")
    text = runner.invoke(app, ["eval", "report", jobs[0], "--bootstrap", "0"]).stdout
    assert "MCQ accuracy: answers withheld" in text
    page = tmp_path / "r.html"
    runner.invoke(app, ["eval", "report", jobs[0], "--html", str(page), "--bootstrap", "0"])
    assert "answers withheld" in page.read_text(encoding="utf-8")
    compared = runner.invoke(app, ["eval", "compare", *jobs, "--bootstrap", "0"])
    assert compared.exit_code == 0, compared.output
    assert compared.stdout.count("answers withheld") == 2
    lines = json.loads(
        runner.invoke(app, ["eval", "compare", *jobs, "--json", "--bootstrap", "0"]).stdout
    )["lines"]
    assert [line["mcq"]["reason"] for line in lines] == ["answers withheld"] * 2
