"""Jobs as a researcher runs them: multiple choice as data (an options column, a Q-Bench-style
JSON), images beside the manifest or elsewhere, the agent against the VLM alone and the tools
alone over the same items, and a job where nothing could be assessed saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.cli.eval import export_rows
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import Job, JobItem, StepRecord, ToolLog
from agentic_iqa.jobs.manifest import (
    ManifestError,
    ManifestFormatError,
    ManifestItem,
    read_manifest,
)
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.query import parse_query, with_options
from agentic_iqa.reports.report import build_report
from agentic_iqa.reports.report_text import render_text
from agentic_iqa.runtime import lifecycle
from tests.agentic_iqa.conftest import graded_photos, write_csv

runner = CliRunner()


def entries(path: Path, **options) -> list[ManifestItem | ManifestError]:
    return list(read_manifest(path, **options))


# -- the manifest -----------------------------------------------------------------------------


def test_options_are_lettered_into_the_query_the_way_the_query_reader_reads_them():
    query = with_options("Is the flower in focus?", ["Yes", "No"])
    assert query == "Is the flower in focus?\nA. Yes\nB. No"
    assert parse_query(query).options == {"A": "Yes", "B": "No"}
    assert parse_query(query).is_multiple_choice


def test_an_options_column_gives_lettered_queries_truth_as_text_or_letter_and_one_id_each(tmp_path):
    graded_photos(tmp_path, 1)
    path = write_csv(
        tmp_path / "m.csv",
        ["image", "query", "options", "answer"],
        [
            ["p0.png", "Is the image blurry?", "Yes|No", "no"],
            ["p0.png", "Which is worst?", '["Noise", "Blur", "Exposure"]', "C"],
            ["p0.png", "Is it dark?", "Yes|No", "Maybe"],
        ],
    )
    first, second, bad = entries(path)
    assert isinstance(first, ManifestItem) and isinstance(second, ManifestItem)
    assert first.query == "Is the image blurry?\nA. Yes\nB. No"
    assert (first.answer, first.options) == ("B", ("Yes", "No"))
    assert second.query.endswith("\nA. Noise\nB. Blur\nC. Exposure")
    assert second.answer == "C"
    # Two questions on one image: two items, told apart by the question, the same on re-read.
    assert first.item_id.startswith("p0.png#") and second.item_id.startswith("p0.png#")
    assert first.item_id != second.item_id
    assert [e.item_id for e in entries(path)[:2]] == [first.item_id, second.item_id]
    assert isinstance(bad, ManifestError)
    assert "answer 'Maybe' on line 4 is neither one of the options" in bad.message


@pytest.mark.parametrize(
    ("cell", "problem"),
    [
        ("Yes", "give 2 to 8 non-empty options"),
        ("Yes|yes", "repeat one another"),
        ("[1, ", "not one"),
    ],
)
def test_bad_options_are_a_bad_row_that_says_why(tmp_path, cell, problem):
    graded_photos(tmp_path, 1)
    path = write_csv(
        tmp_path / "m.csv", ["image", "query", "options"], [["p0.png", "Is it sharp?", cell]]
    )
    (bad,) = entries(path)
    assert isinstance(bad, ManifestError) and problem in bad.message


def test_a_qbench_style_json_list_is_a_manifest_with_its_question_types(tmp_path):
    graded_photos(tmp_path / "images", 2)
    records = [
        {
            "img_path": "p0.png",
            "question": "Is the image clear?",
            "candidates": ["Yes", "No"],
            "correct_ans": "Yes",
            "type": "yes-or-no",
            "concern": "distortion",
        },
        {
            "img_path": "p1.png",
            "question": "How is the sharpness?",
            "candidates": ["Sharp", "Blurry", "Acceptable"],
            "correct_ans": "Blurry",
            "type": "how",
            "concern": "other",
        },
        ["not", "an", "object"],
    ]
    path = tmp_path / "llvisionqa_dev.json"
    path.write_text(json.dumps(records))
    good0, good1, bad = entries(path, image_dir=tmp_path / "images")
    assert (good0.answer, good1.answer) == ("A", "B")
    assert good1.query == "How is the sharpness?\nA. Sharp\nB. Blurry\nC. Acceptable"
    assert good0.extra == {"question_type": "yes-or-no", "concern": "distortion"}
    assert good0.image == (tmp_path / "images" / "p0.png").resolve()
    assert isinstance(bad, ManifestError) and "record 3 is a JSON list" in bad.message


def test_image_dir_limit_and_a_missing_image_that_names_the_path_it_tried(tmp_path):
    graded_photos(tmp_path / "pictures", 3)
    manifest_dir = tmp_path / "scores"
    manifest_dir.mkdir()
    path = write_csv(
        manifest_dir / "mos.csv",
        ["image", "mos"],
        [["p0.png", 50], ["gone.png", 40], ["p1.png", 30], ["p2.png", 20]],
    )
    beside = entries(path)  # resolved next to the manifest: nothing is there
    assert all(isinstance(entry, ManifestError) for entry in beside)
    assert f"(looked for {manifest_dir / 'p0.png'})" in beside[0].message
    found = entries(path, image_dir=tmp_path / "pictures", limit=3)
    assert [type(entry).__name__ for entry in found] == [
        "ManifestItem",
        "ManifestError",
        "ManifestItem",
    ]
    assert str(tmp_path / "pictures" / "gone.png") in found[1].message
    with pytest.raises(ManifestFormatError, match="--image-dir .* is not a folder"):
        entries(path, image_dir=tmp_path / "nowhere")


def test_an_unknown_extension_names_every_format_and_the_dataset_option(tmp_path):
    path = tmp_path / "scores.xlsx"
    path.write_bytes(b"PK")
    with pytest.raises(ManifestFormatError, match=r"\.json .*--dataset NAME --root DIR"):
        read_manifest(path)


# -- jobs -------------------------------------------------------------------------------------


def test_a_qbench_json_runs_as_a_job_and_reports_accuracy_per_question_type(
    engine, agents, tmp_path
):
    graded_photos(tmp_path, 4)
    records = []
    for index in range(4):
        records.append(
            {
                "img_path": f"p{index}.png",
                "question": "Is this image blurry?",
                "candidates": ["Yes", "No"],
                "correct_ans": "Yes" if index else "No",
                "type": "yes-or-no",
                "concern": "distortion",
            }
        )
        records.append(
            {
                "img_path": f"p{index}.png",
                "question": "What is the main problem?",
                "candidates": ["Blur", "Noise", "Compression"],
                "correct_ans": "Blur",
                "type": "what",
                "concern": "distortion",
            }
        )
    path = tmp_path / "qa.json"
    path.write_text(json.dumps(records))
    job_id = lifecycle.submit(engine, JobSpec.build(manifest=path))
    lifecycle.run_local(engine, job_id, agents, workers=2)
    _columns, rows = export_rows(engine, job_id)
    rows = list(rows)
    assert len(rows) == 8 and {row["status"] for row in rows} == {"done"}
    assert {row["question_type"] for row in rows} == {"yes-or-no", "what"}
    # Every answer is one of the item's own options, never a quality level.
    for row in rows:
        assert (
            row["final_answer"] in parse_query(row["query"]).options.values()
            or row["final_answer"][:1] in parse_query(row["query"]).options
        ), row["final_answer"]
    report = build_report(rows, bootstrap=0)
    by_type = {entry["type"]: entry for entry in report["mcq"]["by_type"]}
    assert {kind: entry["n"] for kind, entry in by_type.items()} == {"yes-or-no": 4, "what": 4}
    for kind, entry in by_type.items():
        picked = [row for row in rows if row["question_type"] == kind]
        assert entry["correct"] == sum(bool(row["correct"]) for row in picked)
    assert "  yes-or-no" in render_text({**report, "job": None})


def test_the_agent_the_vlm_alone_and_the_tools_alone_run_over_the_same_items(
    engine, agents, tmp_path
):
    names = graded_photos(tmp_path, 4)
    path = write_csv(
        tmp_path / "m.csv",
        ["image", "mos"],
        [[name, 80 - 15 * index] for index, name in enumerate(names)],
    )
    jobs = {
        mode: lifecycle.submit(
            engine,
            JobSpec.build(manifest=path, mode=mode, tools=["PIQE"] if mode == "tools" else None),
        )
        for mode in ("agent", "vlm", "tools")
    }
    for job_id in jobs.values():
        lifecycle.run_local(engine, job_id, agents, workers=2)
    with session_scope(engine) as session:
        assert {mode: session.get(Job, job_id).mode for mode, job_id in jobs.items()} == {
            "agent": "agent",
            "vlm": "vlm",
            "tools": "tools",
        }
        keys = {
            mode: sorted(session.scalars(select(JobItem.item_key).where(JobItem.job_id == job_id)))
            for mode, job_id in jobs.items()
        }
        assert keys["agent"] == keys["vlm"] == keys["tools"] == sorted(names)

        def steps(job_id: str) -> set[str]:
            return set(
                session.scalars(
                    select(StepRecord.step)
                    .join(JobItem, JobItem.run_id == StepRecord.run_id)
                    .where(JobItem.job_id == job_id)
                )
            )

        def tool_logs(job_id: str) -> int:
            return len(
                session.scalars(
                    select(ToolLog.id)
                    .join(JobItem, JobItem.run_id == ToolLog.run_id)
                    .where(JobItem.job_id == job_id)
                ).all()
            )

        assert steps(jobs["vlm"]) == {"plan", "summarize"}  # no executor subtask at all
        assert tool_logs(jobs["vlm"]) == 0
        assert "tool_execution" in steps(jobs["agent"]) and tool_logs(jobs["agent"]) > 0
        assert steps(jobs["tools"]) == {"tool_execution"}
    for mode in ("agent", "vlm"):
        rows = list(export_rows(engine, jobs[mode])[1])
        assert all(row["status"] == "done" and 1 <= row["quality_score"] <= 5 for row in rows)
    with pytest.raises(ValueError, match="--mode tools runs the tools alone"):
        lifecycle.submit(engine, JobSpec.build(manifest=path, mode="tools"))


def test_a_job_whose_every_row_is_bad_exits_non_zero_with_the_first_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    path = write_csv(tmp_path / "mos.csv", ["image", "mos"], [["a.jpg", 1], ["b.jpg", 2]])
    result = runner.invoke(app, ["eval", "submit", str(path)])
    assert result.exit_code == 1, result.output
    assert "every item is a bad row" in result.output
    assert f"looked for {tmp_path / 'a.jpg'}" in result.output


def test_eval_submit_refuses_mode_and_source_mix_ups(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    path = write_csv(tmp_path / "mos.csv", ["image", "mos"], [["a.jpg", 1]])
    for args, message in [
        (["--mode", "tools"], "--mode tools runs the tools alone"),
        (["--mode", "vlm", "--tools", "PIQE"], "--mode vlm asks no tool"),
        (["--mode", "both"], "unknown --mode 'both'"),
        (["--dataset", "livec", "--root", str(tmp_path)], "not both"),
    ]:
        result = runner.invoke(app, ["eval", "submit", str(path), *args])
        assert result.exit_code == 2 and message in result.output, (args, result.output)
    result = runner.invoke(app, ["eval", "submit"])
    assert result.exit_code == 2 and "--dataset NAME --root DIR" in result.output


# -- public datasets by name ------------------------------------------------------------------


def test_a_dataset_in_its_own_format_becomes_a_job_that_keeps_its_scale(tmp_path, monkeypatch):
    """KonIQ-10k as it ships: its scores file and its 1024x768 folder, one image missing."""
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    root = tmp_path / "koniq"
    names = graded_photos(root / "1024x768", 3)
    lines = ['"image_name","c1","c2","c3","c4","c5","c_total","MOS","SD","MOS_zscore"']
    for index, name in enumerate([*names, "gone.png"]):
        lines.append(f'"{name}",0,0,0.5,0.5,0,100,{4.2 - 0.8 * index:.2f},0.5,70')
    (root / "koniq10k_scores_and_distributions.csv").write_text("\n".join(lines) + "\n")
    result = runner.invoke(
        app,
        [
            "eval",
            "submit",
            "--dataset",
            "KonIQ-10k",
            "--root",
            str(root),
            "--mode",
            "tools",
            "--tools",
            "PIQE",
        ],
    )
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip().splitlines()[0]
    report = json.loads(
        runner.invoke(app, ["eval", "report", job_id, "--json", "--bootstrap", "0"]).stdout
    )
    assert report["counts"]["done"] == 3 and report["counts"]["failed"] == 1
    assert report["job"]["mode"] == "tools" and report["job"]["name"] == "koniq10k-all-tools-PIQE"
    dataset = report["job"]["dataset"]
    assert (dataset["name"], dataset["mos_range"], dataset["higher_is_better"]) == (
        "koniq10k",
        [1.0, 5.0],
        True,
    )
    failure = report["failures"]["top"][0]["example_error"]
    assert f"looked for {root.resolve() / '1024x768' / 'gone.png'}" in failure
    limited = runner.invoke(
        app,
        [
            "eval",
            "submit",
            "--dataset",
            "koniq",
            "--root",
            str(root),
            "--limit",
            "2",
            "--mode",
            "tools",
            "--tools",
            "PIQE",
        ],
    )
    assert limited.exit_code == 0 and "2 items (0 bad rows" in limited.output


def test_qbench_by_name_reports_accuracy_per_question_type(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    root = tmp_path / "LLVisionQA"
    names = graded_photos(root / "images", 3)
    questions = []
    for name in names:
        questions.append(
            {
                "img_path": name,
                "question": "Is this image blurry?",
                "candidates": ["Yes", "No"],
                "correct_ans": "Yes",
                "type": 0,
                "concern": 0,
            }
        )
        questions.append(
            {
                "img_path": name,
                "question": "How is the sharpness of the image?",
                "candidates": ["Good", "Fair", "Poor"],
                "correct_ans": "Poor",
                "type": 2,
                "concern": 0,
            }
        )
    (root / "llvisionqa_dev.json").write_text(json.dumps(questions))
    result = runner.invoke(app, ["eval", "submit", "--dataset", "qbench", "--root", str(root)])
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip().splitlines()[0]
    report = json.loads(runner.invoke(app, ["eval", "report", job_id, "--json"]).stdout)
    assert report["counts"] == {"total": 6, "done": 6, "failed": 0, "by_status": {"done": 6}}
    by_type = {entry["type"]: entry["n"] for entry in report["mcq"]["by_type"]}
    assert by_type == {"yes-or-no": 3, "how": 3}
    text = runner.invoke(app, ["eval", "report", job_id]).stdout
    assert "MCQ accuracy" in text and "yes-or-no" in text and "how" in text


def test_eval_datasets_lists_each_reader_with_its_files_and_scale():
    result = runner.invoke(app, ["eval", "datasets", "--json"])
    assert result.exit_code == 0
    listed = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert set(listed) == {"agiqa3k", "kadid10k", "koniq10k", "livec", "qbench", "spaq", "tid2013"}
    assert listed["tid2013"]["full_reference"] and listed["qbench"]["kind"] == "mcq"
    text = runner.invoke(app, ["eval", "datasets"]).stdout
    assert "koniq10k_scores_and_distributions.csv" in text


def test_eval_compare_puts_agent_vlm_and_tools_jobs_side_by_side_with_paired_cis(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    names = graded_photos(tmp_path, 6)
    path = write_csv(
        tmp_path / "m.csv",
        ["image", "mos"],
        [[name, 80 - 10 * index] for index, name in enumerate(names)],
    )
    jobs = []
    for args in (["--mode", "agent"], ["--mode", "vlm"], ["--mode", "tools", "--tools", "PIQE"]):
        result = runner.invoke(app, ["eval", "submit", str(path), *args])
        assert result.exit_code == 0, result.output
        jobs.append(result.stdout.strip().splitlines()[0])
    result = runner.invoke(app, ["eval", "compare", *jobs, "--json", "--bootstrap", "200"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [job["mode"] for job in document["jobs"]] == ["agent", "vlm", "tools"]
    lines = {line["source"]: line for line in document["lines"]}
    assert set(lines) == {"agent", "vlm", "tools/PIQE"} and lines["agent"]["baseline"]
    for source in ("vlm", "tools/PIQE"):
        difference = lines[source]["difference"]
        assert difference["n"] == 6
        assert difference["srcc"] == pytest.approx(
            lines[source]["mos"]["srcc"] - lines["agent"]["mos"]["srcc"]
        )
        low, high = difference["srcc_ci"]
        assert low <= high
    text = runner.invoke(app, ["eval", "compare", *jobs, "--bootstrap", "50"]).stdout
    assert "paired" in text and "tools/PIQE" in text
