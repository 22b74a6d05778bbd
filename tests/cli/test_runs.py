"""Looking at stored results from the command line: ``runs list`` / ``runs show``, short job ids
for ``eval status/report/export``, the summary after ``eval submit``, and the report's header.

One SQLite database per module holds a finished local job of two photos and one ``assess`` run;
tests that need ids of their own (ambiguous prefixes) add rows with chosen ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.conftest import REPO

runner = CliRunner()
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A database with a local job of two photos (submitted with --wait, no broker) and an
    ``assess`` run; the environment points every command at it."""

    from agentic_iqa.fitting.degradations import degrade
    from tests.conftest import example_photo

    root = tmp_path_factory.mktemp("runs")
    folder = root / "photos"
    folder.mkdir()
    clean = example_photo((320, 240))
    clean.save(folder / "a_clean.png")
    degrade(clean, "blur", 4).save(folder / "b_blurred.png")
    with pytest.MonkeyPatch.context() as patch:
        url = f"sqlite:///{root / 'results.sqlite3'}"
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        patch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
        patch.setenv("AGENTIC_IQA_DEVICE", "cpu")
        patch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
        submitted = runner.invoke(
            app, ["eval", "submit", str(folder), "--name", "two <photos>", "--wait"]
        )
        assert submitted.exit_code == 0, submitted.output
        assessed = runner.invoke(
            app, ["assess", str(REPO / "examples/i03_blurred.png"), "-q", "Is the image blurry?"]
        )
        assert assessed.exit_code == 0, assessed.output
        run_id = re.search(r"run ([0-9a-f-]{36}) stored", assessed.stderr).group(1)
        yield {
            "url": url,
            "folder": folder,
            "submitted": submitted,
            "job_id": submitted.stdout.strip().splitlines()[-1],
            "run_id": run_id,
        }


def _session(url: str):  # noqa: ANN202
    from agentic_iqa.db.engine import make_engine, session_scope

    return session_scope(make_engine(url))


# -- eval submit: the summary ---------------------------------------------------------------------


def test_submit_ends_with_a_summary_and_says_wait_is_a_no_op_without_a_broker(stored):
    job_id, submitted = stored["job_id"], stored["submitted"]
    short = job_id[:8]
    assert submitted.stdout.strip() == job_id  # stdout: the id alone, for scripts
    lines = submitted.stderr.splitlines()
    assert (
        "note: no broker (AGENTIC_IQA_BROKER_URL is not set), so the job runs in this "
        "process and the command waits for it anyway: --wait changes nothing"
    ) in lines
    assert re.search(
        rf"^job {short} \(two <photos>\) done after \d+\.\d s: 2 done, 0 failed "
        r"of 2 items$",
        submitted.stderr,
        re.MULTILINE,
    )
    assert f"results: job {job_id} in {stored['url']}" in lines
    assert lines[-5:] == [
        "next:",
        f"  agentic-iqa eval status {short}",
        f"  agentic-iqa eval report {short} [--html report.html]",
        f"  agentic-iqa eval export {short} --format csv -o results.csv",
        f"  agentic-iqa runs list --job {short}",
    ]


def test_the_summary_masks_the_database_password():
    from types import SimpleNamespace

    from sqlalchemy.engine import make_url

    from agentic_iqa.cli.common import redact_url

    engine = SimpleNamespace(url=make_url("postgresql+psycopg://iqa:s3cr3t-pass@db:5432/results"))
    assert redact_url(engine) == "postgresql+psycopg://***@db:5432/results"


# -- eval status / report / export: the latest job, or a short id --------------------------------


def test_report_and_export_default_to_the_latest_job_and_take_its_short_id(stored, tmp_path):
    job_id = stored["job_id"]
    latest = runner.invoke(app, ["eval", "report", "--json", "--bootstrap", "0"])
    assert latest.exit_code == 0, latest.output
    document = json.loads(latest.stdout)
    assert document["job"]["id"] == job_id and document["job"]["name"] == "two <photos>"
    assert document["job"]["backend"] == "builtin"
    assert document["job"]["query"] == "Rate the quality of this image."
    by_prefix = runner.invoke(app, ["eval", "report", job_id[:8], "--json", "--bootstrap", "0"])
    assert (
        json.loads(by_prefix.stdout)["counts"]
        == document["counts"]
        == {"total": 2, "done": 2, "failed": 0, "by_status": {"done": 2}}
    )
    exported = tmp_path / "latest.jsonl"
    result = runner.invoke(app, ["eval", "export", "--format", "jsonl", "-o", str(exported)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert sorted(row["item_id"] for row in rows) == ["a_clean.png", "b_blurred.png"]
    assert {row["query"] for row in rows} == {"Rate the quality of this image."}
    status = runner.invoke(app, ["eval", "status", job_id[:6], "--json"])
    assert json.loads(status.stdout)["job_id"] == job_id
    page = tmp_path / "report.html"
    html = runner.invoke(
        app, ["eval", "report", job_id[:8], "--html", str(page), "--bootstrap", "0"]
    )
    assert html.exit_code == 0, html.output
    text = page.read_text(encoding="utf-8")
    assert f"<title>Evaluation job report: two &lt;photos&gt; ({job_id[:8]})</title>" in text
    assert (
        f'<td class="text"><span class="long">{job_id}</span></td>' in text
        and "<photos>" not in text
    )
    assert html.stdout.startswith(f"Job:        {job_id}\nName:       two <photos>\n")


def test_an_ambiguous_or_unknown_job_id_is_one_clear_error(stored):
    from agentic_iqa.db.models import Job

    with _session(stored["url"]) as session:
        for suffix in ("1", "2"):
            session.add(
                Job(
                    id=f"abcabc0{suffix}-0000-4000-8000-000000000000",
                    name="twin",
                    manifest="m.csv",
                    default_query="q",
                    status="done",
                    created_at=LONG_AGO,
                )
            )  # never the latest job
    for command in (
        ["eval", "report"],
        ["eval", "export"],
        ["eval", "status"],
        ["runs", "list", "--job"],
    ):
        ambiguous = runner.invoke(app, [*command, "abcabc"])
        assert ambiguous.exit_code == 1, command
        assert ambiguous.output.strip() == (
            "error: job id 'abcabc' is ambiguous: it starts "
            "abcabc01-0000-4000-8000-000000000000, abcabc02-0000-4000-8000-000000000000; "
            "give more characters"
        ), command
        unknown = runner.invoke(app, [*command, "fedcba98"])
        assert unknown.exit_code == 1
        assert unknown.output.strip() == (
            f"error: no job with id 'fedcba98' in the database {stored['url']}"
        )
    assert (
        json.loads(runner.invoke(app, ["eval", "status", "abcabc02", "--json"]).stdout)["name"]
        == "twin"
    )


# -- runs list / runs show ------------------------------------------------------------------------


def test_runs_list_shows_the_recent_runs_newest_first(stored):
    result = runner.invoke(app, ["runs", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    first = next(line for line in lines if stored["run_id"][:8] in line)
    assert "succeeded" in first and "Is the image blurry?" in first
    assert "i03_blurred.png" in first and re.search(r"│ Yes\S*", first)
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", first)
    document = json.loads(runner.invoke(app, ["runs", "list", "--json", "--limit", "2"]).stdout)
    assert len(document) == 2 and document[0]["id"] == stored["run_id"]
    assert document[0]["final_answer"].startswith("Yes")
    assert re.search(
        r"^\d+ run\(s\); `agentic-iqa runs show ID` shows one in full$", result.stdout, re.MULTILINE
    )


def test_runs_list_of_a_job_lists_its_items_runs_in_manifest_order(stored):
    result = runner.invoke(app, ["runs", "list", "--job", stored["job_id"][:8], "--json"])
    rows = json.loads(result.stdout)
    assert [row["item_id"] for row in rows] == ["a_clean.png", "b_blurred.png"]
    assert all(row["job_id"] == stored["job_id"] and row["status"] == "succeeded" for row in rows)
    assert rows[1]["quality_score"] < rows[0]["quality_score"]
    table = runner.invoke(app, ["runs", "list", "--job", stored["job_id"][:8]]).stdout
    assert f"Runs of job {stored['job_id'][:8]}" in table and "b_blurred.png" in table


def test_runs_show_prints_plan_steps_tools_and_answer(stored):
    result = runner.invoke(app, ["runs", "show", stored["run_id"][:8]])
    assert result.exit_code == 0, result.output
    text = result.stdout
    lines = text.splitlines()
    assert lines[0] == f"Run {stored['run_id']}: succeeded"
    assert "  query      Is the image blurry?" in lines
    assert "Plan: IQA, scope whole image, distortions: Blurs (explicit), No-Reference" in lines
    assert any(re.fullmatch(r"  Blurs: (severe|extreme) - edges .*", line) for line in lines)
    steps = [
        line
        for line in lines
        if re.match(
            r"│ (plan|distortion_analysis|tool_selection|"
            r"tool_execution|summarize) ",
            line,
        )
    ]
    assert [line.split("│")[1].strip() for line in steps] == [
        "plan",
        "distortion_analysis",
        "tool_selection",
        "tool_execution",
        "summarize",
    ]
    for line in steps:  # worker, queue, start and end time, duration
        assert re.search(
            r"│ succeeded\s+│ embedded\s+│ in-process\s+│ 1\s+│ "
            r"\d\d:\d\d:\d\d\.\d{3}\s+│ \d\d:\d\d:\d\d\.\d{3}\s+│ \d+ ms",
            line,
        ), line
    tool = next(line for line in lines if "│ PIQE" in line)
    assert re.search(
        r"│ 0\s+│ whole image\s+│ whole image\s+│ Blurs\s+│ PIQE\s+│\s+[\d.]+\s+│ "
        r"[1-5]\.\d\d",
        tool,
    )
    assert any(line.startswith("Answer: Yes") for line in lines)
    assert any(line.startswith("Why: ") for line in lines)


def test_runs_show_json_has_every_part(stored):
    document = json.loads(runner.invoke(app, ["runs", "show", stored["run_id"], "--json"]).stdout)
    assert document["id"] == stored["run_id"] and document["status"] == "succeeded"
    assert document["plan"]["distortions"] == {"Global": ["Blurs"]}
    assert [step["step"] for step in document["steps"]] == [
        "plan",
        "distortion_analysis",
        "tool_selection",
        "tool_execution",
        "summarize",
    ]
    step = document["steps"][0]
    assert step["worker"] == "embedded" and step["queue"] == "in-process"
    assert step["duration_s"] >= 0 and step["started_at"] <= step["finished_at"]
    (log,) = document["tool_logs"]
    assert log["tool"] == "PIQE" and 1 <= log["normalized_score"] <= 5
    # The database keeps the paper's key; what is shown says it in words, as the text does.
    assert log["object"] == "whole image"
    assert {entry["object"] for entry in document["distortions"]} <= {"whole image"}
    from agentic_iqa.db.models import ToolLog

    with _session(stored["url"]) as session:
        stored_object = session.query(ToolLog.object_name).filter_by(run_id=document["id"]).one()
    assert stored_object == ("Global",)
    text = runner.invoke(app, ["runs", "show", stored["run_id"]]).stdout
    assert "Global" not in text and "whole image" in text
    assert log["raw_score"] is not None and log["load_time_s"] is not None
    assert document["final_answer"].startswith("Yes") and document["quality_reasoning"]
    assert document["replans"] == []


def test_runs_show_names_a_jobs_item_by_line_id_or_image(stored):
    job = stored["job_id"]
    by_name = json.loads(
        runner.invoke(
            app, ["runs", "show", "--job", job[:8], "--item", "b_blurred.png", "--json"]
        ).stdout
    )
    assert by_name["job_item"]["item_id"] == "b_blurred.png"
    assert by_name["image"].endswith("/b_blurred.png")
    latest_job = json.loads(
        runner.invoke(
            app, ["runs", "show", "--item", str(by_name["job_item"]["line"]), "--json"]
        ).stdout
    )
    assert latest_job["id"] == by_name["id"]  # --job defaults to the latest job
    text = runner.invoke(app, ["runs", "show", "--job", job, "--item", "a_clean.png"]).stdout
    assert f"  job        {job[:8]}, item a_clean.png (line " in text
    missing = runner.invoke(app, ["runs", "show", "--job", job, "--item", "zzz.png"])
    assert missing.exit_code == 1
    assert f"error: job {job[:8]} has no item 'zzz.png'" in missing.output
    neither = runner.invoke(app, ["runs", "show"])
    assert neither.exit_code == 1 and "name one run" in neither.output


def test_an_ambiguous_or_unknown_run_id_is_one_clear_error_and_output_is_redacted(stored):
    from agentic_iqa.db.models import Run
    from agentic_iqa.state import initial_state, state_to_json

    query = "Is https://bob:hunter2-secret@cdn.example/x.png sharp?"
    with _session(stored["url"]) as session:
        for suffix in ("1", "2"):
            session.add(
                Run(
                    id=f"0dd0dd0{suffix}-0000-4000-8000-000000000000",
                    query=query,
                    image_path="/data/x.png",
                    status="failed",
                    state_json=state_to_json(initial_state(query, "/data/x.png")),
                    max_replan_iterations=2,
                    created_at=LONG_AGO,
                    error="APIConnectionError at http://bob:hunter2-secret@vlm/v1",
                )
            )
    ambiguous = runner.invoke(app, ["runs", "show", "0dd0dd"])
    assert ambiguous.exit_code == 1
    assert ambiguous.output.strip() == (
        "error: run id '0dd0dd' is ambiguous: it starts 0dd0dd01-0000-4000-8000-000000000000, "
        "0dd0dd02-0000-4000-8000-000000000000; give more characters"
    )
    unknown = runner.invoke(app, ["runs", "show", "ffff0000"])
    assert unknown.exit_code == 1
    assert unknown.output.strip() == (
        f"error: no run with id 'ffff0000' in the database {stored['url']}"
    )
    shown = runner.invoke(app, ["runs", "show", "0dd0dd01"])
    as_json = runner.invoke(app, ["runs", "show", "0dd0dd01", "--json"])
    listed = runner.invoke(app, ["runs", "list", "--limit", "50"])
    for output in (shown.stdout, as_json.stdout, listed.stdout):
        assert "hunter2" not in output and "https://***@cdn.example/x.png" in output
    assert "Error: APIConnectionError at http://***@vlm/v1" in shown.stdout


def test_runs_help_loads_no_database_layer():
    import subprocess
    import sys

    probe = (
        "import sys; from agentic_iqa.cli import app\n"
        "try: app(args=['runs', '--help'], prog_name='agentic-iqa')\n"
        "except SystemExit: pass\n"
        "print(sorted(m for m in ('sqlalchemy', 'numpy', 'torch') if m in sys.modules),"
        " file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert "list" in result.stdout and "show" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "[]"


def test_a_distortion_line_states_type_and_severity_once_and_keeps_a_qualification():
    from agentic_iqa.cli.render import distortion_line
    from agentic_iqa.state import DistortionAnalysis

    def line(explanation: str, severity: str = "slight") -> str:
        return distortion_line(
            "Global",
            DistortionAnalysis(
                type="Color distortions", severity=severity, explanation=explanation
            ),
        )

    assert (
        line("Color distortions: slight; colours are washed out (colourfulness 9.0).")
        == "Color distortions: slight - colours are washed out (colourfulness 9.0)."
    )
    assert line(
        "Color distortions: slight reading, usual in clean photos; colours look "
        "natural (colourfulness 34.6)."
    ) == (
        "Color distortions: slight - slight reading, usual in clean photos; colours look "
        "natural (colourfulness 34.6)."
    )
    assert (
        line("Color distortions: not visible; colours look natural (colourfulness 40.0).", "none")
        == "Color distortions: none - colours look natural (colourfulness 40.0)."
    )
    assert (
        line("The colours look a little dull.")
        == "Color distortions: slight - The colours look a little dull."
    )
