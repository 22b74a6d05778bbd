import json
import re
import subprocess
import sys

from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.conftest import REPO

runner = CliRunner()


def test_tools_list_json_reports_availability():
    result = runner.invoke(app, ["tools", "list", "--json"])
    assert result.exit_code == 0
    tools = {row["name"]: row for row in json.loads(result.stdout)}
    assert len(tools) == 29
    assert tools["SSIM"]["available"] is True
    assert tools["LPIPS"]["available"] is False
    assert "LPIPS_v0.1_alex-df73285e.pth" in tools["LPIPS"]["missing"]
    assert tools["CKDN"]["normalization_warnings"]


def test_tools_list_table():
    result = runner.invoke(app, ["tools", "list", "--type", "NR"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "PIQE" in result.stdout and "SSIM" not in result.stdout
    assert "no, needs: niqe_modelparameters.mat" in result.stdout


def test_tools_run_json_on_the_example(tmp_path):
    env = {"AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{tmp_path}/c.sqlite3", "AGENTIC_IQA_DEVICE": "cpu"}
    args = ["tools", "run", "SSIM", str(REPO / "examples/i03_blurred.png"),
            "--reference", str(REPO / "examples/i03_reference.png"), "--json"]
    first = runner.invoke(app, args, env=env)
    assert first.exit_code == 0, first.output
    result = json.loads(first.stdout)
    assert result["tool"] == "SSIM" and result["cached"] is False
    assert result["raw_score"] == __import__("pytest").approx(0.6997, abs=1e-3)
    assert 2.3 < result["normalized_score"] < 2.7
    second = json.loads(runner.invoke(app, args, env=env).stdout)
    assert second["cached"] is True


def test_tools_run_human_output_and_errors(tmp_path):
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu"}
    ok = runner.invoke(app, ["tools", "run", "PIQE", str(REPO / "examples/i03_blurred.png")],
                       env=env)
    assert ok.exit_code == 0
    assert re.search(r"quality \(1-5\)\s+1\.000", ok.stdout)
    missing = runner.invoke(app, ["tools", "run", "PIQE", str(tmp_path / "gone.jpg")], env=env)
    assert missing.exit_code == 1
    assert "gone.jpg" in missing.output and "file not found" in missing.output
    unknown = runner.invoke(app, ["tools", "run", "FOO", str(REPO / "examples/i03_blurred.png")],
                            env=env)
    assert unknown.exit_code == 1 and "unknown tool 'FOO'" in unknown.output


def test_tools_info_lists_urls_and_paths():
    result = runner.invoke(app, ["tools", "info", "lpips"])
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert info["name"] == "LPIPS"
    assert any(w["url"].endswith("LPIPS_v0.1_alex-df73285e.pth") for w in info["weights"])
    assert info["availability"]["status"] == "missing"


def test_console_script_entry_point():
    result = subprocess.run([sys.executable, "-m", "agentic_iqa", "--help"], capture_output=True,
                            text=True, check=True)
    assert "tools" in result.stdout


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci/run").read_text()
    commands = re.findall(r"```(?:bash|sh)\n(.+?)\n```", readme)
    test_commands = [c for c in commands if "pytest" in c]
    assert len(test_commands) == 1, "README must show exactly one test command"
    assert test_commands[0].strip() in ci


def test_assess_json_on_the_example():
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu"}
    result = runner.invoke(app, ["assess", str(REPO / "examples/i03_blurred.png"),
                                 "-q", "Rate the quality of this image.", "--json"], env=env)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["final_answer"] in {"Bad", "Poor"}
    assert 1.0 <= document["quality_score"] <= 2.5
    assert set(document["level_distribution"]) == {"Bad", "Poor", "Fair", "Good", "Excellent"}
    assert document["plan"]["query_type"] == "IQA"
    assert document["executor_evidence"]["tool_logs"]


def test_assess_human_output_shows_plan_evidence_answer_and_timing():
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu", "COLUMNS": "200"}
    result = runner.invoke(app, ["assess", str(REPO / "examples/i03_blurred.png"),
                                 "-q", "Is the image blurry?"], env=env)
    assert result.exit_code == 0, result.output
    for expected in ("Plan: IQA", "Distortions:", "Blurs", "Answer: Yes", "Why:", "Time:"):
        assert expected in result.stdout


def test_assess_missing_image_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["assess", str(tmp_path / "none.png"), "-q", "Rate it"])
    assert result.exit_code == 1
    assert "image not found" in result.output


def test_db_upgrade_creates_the_schema(tmp_path):
    import sqlalchemy

    url = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    result = runner.invoke(app, ["db", "upgrade", "--url", url])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.stdout
    tables = set(sqlalchemy.inspect(sqlalchemy.create_engine(url)).get_table_names())
    assert {"runs", "step_records", "tool_logs", "replan_history"} <= tables


def test_assess_stores_the_run_in_the_configured_database(tmp_path):
    import sqlalchemy

    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DATABASE_URL": url}
    result = runner.invoke(app, ["assess", str(REPO / "examples/i03_reference.png"),
                                 "-q", "Is this image noisy?", "--json"], env=env)
    assert result.exit_code == 0, result.output
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        runs = connection.execute(sqlalchemy.text(
            "SELECT status, final_answer FROM runs")).all()
        steps = connection.execute(sqlalchemy.text(
            "SELECT step FROM step_records ORDER BY id")).scalars().all()
    assert runs == [("succeeded", json.loads(result.stdout)["final_answer"])]
    assert steps == ["plan", "distortion_analysis", "tool_selection", "tool_execution",
                     "summarize"]


def test_distributed_without_a_broker_is_a_clear_error():
    result = runner.invoke(app, ["assess", str(REPO / "examples/i03_reference.png"),
                                 "--distributed"], env={"AGENTIC_IQA_BROKER_URL": ""})
    assert result.exit_code == 1
    assert "AGENTIC_IQA_BROKER_URL" in result.output


def _tiny_and_truncated(folder):
    import io

    from PIL import Image

    from tests.conftest import natural_image

    tiny = folder / "tiny.png"
    Image.new("RGB", (1, 1), (128, 128, 128)).save(tiny)
    buffer = io.BytesIO()
    Image.fromarray(natural_image()).save(buffer, format="JPEG", quality=90)
    cut = folder / "cut.jpg"
    cut.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    small = folder / "small.png"
    Image.fromarray(natural_image(size=(64, 64))).save(small)
    return tiny, cut, small


def test_tools_run_on_a_too_small_image_gives_the_tools_minimum_fast(tmp_path, weights_dir):
    import time

    from iqa_tools.images import MIN_IMAGE_SIDE

    tiny, _cut, small = _tiny_and_truncated(tmp_path)
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu",
           "AGENTIC_IQA_WEIGHTS_DIR": str(weights_dir)}
    started = time.perf_counter()
    result = runner.invoke(app, ["tools", "run", "BRISQUE", str(tiny)], env=env)
    assert time.perf_counter() - started < 5
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert (f"error: image {str(tiny)!r} is 1x1 pixels; BRISQUE needs at least "
            f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}") in message
    assert "IndexError" not in message
    niqe = runner.invoke(app, ["tools", "run", "niqe", str(small), "--no-fallback"], env=env)
    assert niqe.exit_code == 1
    assert "is 64x64 pixels; NIQE needs at least 96x96" in " ".join(niqe.output.split())
    brisque = runner.invoke(app, ["tools", "run", "BRISQUE", str(small), "--json"], env=env)
    assert brisque.exit_code == 0, brisque.output
    assert json.loads(brisque.stdout)["tool"] == "BRISQUE"


def test_assess_on_an_image_no_tool_can_read_is_one_clear_error(tmp_path):
    tiny, cut, small = _tiny_and_truncated(tmp_path)
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu",
           "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'runs.sqlite3'}"}
    reference = str(REPO / "examples/i03_reference.png")
    cases = [
        ([str(cut)], "corrupt or truncated image data"),
        ([str(tiny), "--json"], "is 1x1 pixels; the IQA tools need at least"),
        ([str(small), "--reference", reference], "full-reference tools compare pixel by pixel"),
    ]
    for arguments, expected in cases:
        result = runner.invoke(app, ["assess", *arguments, "-q", "Rate this image."], env=env)
        assert result.exit_code == 1, result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith("error: ")
        assert expected in " ".join(result.output.split())
        assert "Traceback" not in result.output and "Unable to determine" not in result.output
        assert result.stdout == ""


def test_assess_with_an_unreachable_server_shows_the_reason_redacted(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens
    env = {"AGENTIC_IQA_VLM_BACKEND": "openai", "AGENTIC_IQA_VLM_MODEL": "test-model",
           "AGENTIC_IQA_VLM_BASE_URL": f"http://iqa:s3cr3t-pass@127.0.0.1:{port}/v1",
           "OPENAI_API_KEY": "sk-test-0123456789", "AGENTIC_IQA_PLANNER_MAX_RETRIES": "0",
           "AGENTIC_IQA_PLANNER_TIMEOUT": "5", "AGENTIC_IQA_TOOL_CACHE": "memory",
           "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'runs.sqlite3'}",
           "COLUMNS": "300"}
    image = str(REPO / "examples/i03_blurred.png")
    human = runner.invoke(app, ["assess", image, "-q", "Rate this image."], env=env)
    assert human.exit_code == 1, human.output
    assert "Planning failed: None" not in human.stdout
    shown = " ".join(human.stdout.split())
    assert "Planning failed:" in shown and "APIConnectionError" in shown
    assert f"127.0.0.1:{port}/v1" in shown
    as_json = runner.invoke(app, ["assess", image, "-q", "Rate this image.", "--json",
                                  "--no-store"], env=env)
    assert as_json.exit_code == 1, as_json.output
    error = json.loads(as_json.stdout)["error"]
    assert "APIConnectionError" in error and f"127.0.0.1:{port}/v1" in error
    stored = runner.invoke(app, ["assess", image, "-q", "Rate this image.", "--json"], env=env)
    assert "APIConnectionError" in json.loads(stored.stdout)["error"]
    for output in (human.output, as_json.output, stored.output):
        assert "s3cr3t-pass" not in output and "sk-test-0123456789" not in output


def test_report_shows_a_planner_errors_message_redacted_in_both_outputs():
    from rich.console import Console

    from agentic_iqa.report import render_state, state_document
    from agentic_iqa.state import PlannerError, initial_state, merge_state

    failure = PlannerError(error_type="api_error", backend="openai",
                           message="HTTP 401 from https://bob:hunter2-secret@llm.example/v1 "
                                   "[Errno 111]")
    state = merge_state(initial_state("Rate it.", "x.png"),
                        {"error": failure.model_dump_json()})
    console = Console(record=True, width=300)
    render_state(state, console)
    text = console.export_text()
    assert "Planning failed: HTTP 401 from https://***@llm.example/v1 [Errno 111]" in text
    document = state_document(state)
    assert document["error"] == "HTTP 401 from https://***@llm.example/v1 [Errno 111]"
    assert document["error_details"]["error_type"] == "api_error"
    assert "hunter2" not in json.dumps(document)
    assert state_document(initial_state("Rate it.", "x.png"))["error"] is None
