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


def test_tools_list_into_a_pipe_cuts_nothing_and_notes_once(tmp_path):
    env = {"TORCH_HOME": str(tmp_path / "torch"), "COLUMNS": "80"}
    result = runner.invoke(app, ["tools", "list"], env=env)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    for name in (
        "cfanet_fr_kadid_res50-2c4cc61d.pth",
        "HF timm/vit_base_patch8_224.augreg2_in21k_ft_in1k",
        "NIMA_InceptionV2_ava-b0c77c00.pth",
    ):
        assert sum(name in line for line in lines) >= 1, name  # whole, on one line
    assert "…" not in result.stdout
    (needs,) = [line for line in lines if "tools need weights" in line]
    assert needs.startswith("21 tools need weights: agentic-iqa tools download --paper")
    notes = [line for line in lines if line.startswith("note:")]
    assert len(notes) == 1 and "CKDN, UNIQUE, TReS, WaDIQaM_NR, ARNIQA, BRISQUE" in notes[0]
    assert "install-weights" not in result.stdout
    fr = runner.invoke(app, ["tools", "list", "--type", "FR"], env=env).stdout.splitlines()
    (needs,) = [line for line in fr if "tools need weights" in line]
    assert needs == (
        "7 tools need weights: agentic-iqa tools download TOPIQ_FR AHIQ LPIPS DISTS "
        "WaDIQaM_FR PieAPP CKDN"
    )
    assert [line for line in fr if line.startswith("note:")] == [
        "note: the normalization of CKDN is not monotone over part of the documented raw range "
        "(`agentic-iqa tools info TOOL` says where)"
    ]


def test_tools_list_notes_only_what_applies(tmp_path, weights_dir):
    from iqa_tools.catalog import default_metadata_text

    document = json.loads(default_metadata_text())
    document["tools"] = {name: document["tools"][name] for name in ("SSIM", "NIQE", "LPIPS")}
    metadata = tmp_path / "tools.json"
    metadata.write_text(json.dumps(document))
    env = {
        "TORCH_HOME": str(tmp_path / "torch"),
        "AGENTIC_IQA_METADATA_PATH": str(metadata),
        "AGENTIC_IQA_FALLBACK_CHAIN": '["NIQE"]',
        "AGENTIC_IQA_WEIGHTS_DIR": str(weights_dir),
    }
    result = runner.invoke(app, ["tools", "list"], env=env)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-2:] == [
        "2 of 3 tools can run here.",
        "1 tool needs weights: agentic-iqa tools download LPIPS",
    ]
    ready = runner.invoke(app, ["tools", "list", "--type", "NR"], env=env)
    assert ready.stdout.splitlines()[-1] == "1 of 1 tools can run here."  # no notes at all


def test_tools_run_json_on_the_example(tmp_path):
    env = {"AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{tmp_path}/c.sqlite3", "AGENTIC_IQA_DEVICE": "cpu"}
    args = [
        "tools",
        "run",
        "SSIM",
        str(REPO / "examples/i03_blurred.png"),
        "--reference",
        str(REPO / "examples/i03_reference.png"),
        "--json",
    ]
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
    ok = runner.invoke(
        app, ["tools", "run", "PIQE", str(REPO / "examples/i03_blurred.png")], env=env
    )
    assert ok.exit_code == 0
    assert re.search(r"quality \(1-5\)\s+1\.000", ok.stdout)
    missing = runner.invoke(app, ["tools", "run", "PIQE", str(tmp_path / "gone.jpg")], env=env)
    assert missing.exit_code == 1
    assert "gone.jpg" in missing.output and "file not found" in missing.output
    unknown = runner.invoke(
        app, ["tools", "run", "FOO", str(REPO / "examples/i03_blurred.png")], env=env
    )
    assert unknown.exit_code == 1 and "unknown tool 'FOO'" in unknown.output


def _cli(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "agentic_iqa", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, **env},
    )


def test_tools_run_a_named_tool_without_weights_is_one_error_and_no_fallback(tmp_path):
    torch_home = tmp_path / "torch"
    env = {
        "TORCH_HOME": str(torch_home),
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "COLUMNS": "80",
    }
    image = str(REPO / "examples/i03_blurred.png")
    result = _cli("tools", "run", "NIQE", image, env=env)
    assert result.returncode == 1
    assert result.stdout == ""  # no score, no fallback tool
    (line,) = result.stderr.splitlines()
    assert line == (
        "error: NIQE cannot run here: missing niqe_modelparameters.mat: run `agentic-iqa tools "
        f"download NIQE` to fetch it into {torch_home / 'hub' / 'pyiqa'} (or copy it there, e.g. "
        "with `agentic-iqa tools install-weights DIR`, or set AGENTIC_IQA_WEIGHTS_DIR to a "
        "folder holding it)"
    )
    weights = tmp_path / "weights"
    configured = _cli(
        "tools",
        "run",
        "NIQE",
        image,
        "--json",
        env={**env, "AGENTIC_IQA_WEIGHTS_DIR": str(weights)},
    )
    assert configured.returncode == 1 and configured.stdout == ""
    assert f"to fetch it into {weights} (or copy it there)" in configured.stderr


def test_tools_run_fallback_only_when_asked_and_said_once(tmp_path):
    env = {
        "TORCH_HOME": str(tmp_path / "torch"),
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "COLUMNS": "80",
    }
    result = _cli(
        "tools", "run", "NIQE", str(REPO / "examples/i03_blurred.png"), "--fallback", env=env
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert result.stdout.startswith("PIQE on ")
    assert output.count("niqe_modelparameters.mat") == 1  # the reason, said once
    (reason,) = [line for line in result.stdout.splitlines() if "fell back" in line]
    assert reason.startswith("fell back from NIQE: NIQE cannot run here: missing ")
    assert reason.endswith("or set AGENTIC_IQA_WEIGHTS_DIR to a folder holding it)")  # unwrapped
    assert "trying fallbacks" not in result.stderr


def test_tools_info_lists_urls_and_paths():
    result = runner.invoke(app, ["tools", "info", "lpips", "--json"])
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert info["name"] == "LPIPS"
    assert any(w["url"].endswith("LPIPS_v0.1_alex-df73285e.pth") for w in info["weights"])
    assert info["availability"]["status"] == "missing"


def test_console_script_entry_point(tmp_path):
    """The `agentic-iqa` script pip installed beside this interpreter (the entry point in
    pyproject.toml), run from outside the checkout: not `python -m agentic_iqa`."""
    from pathlib import Path

    script = Path(sys.executable).with_name("agentic-iqa")
    assert script.is_file(), f"no console script {script}: is the package installed?"
    result = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: agentic-iqa" in result.stdout
    for command in ("tools", "assess", "eval", "runs", "db", "worker"):
        assert re.search(rf"^\W*{command}\b", result.stdout, re.MULTILINE), command


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci/run").read_text()
    commands = re.findall(r"```(?:bash|sh)\n(.+?)\n```", readme)
    test_commands = [c for c in commands if "pytest" in c]
    assert len(test_commands) == 1, "README must show exactly one test command"
    assert test_commands[0].strip() in ci


def test_assess_json_on_the_example():
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu"}
    result = runner.invoke(
        app,
        [
            "assess",
            str(REPO / "examples/i03_blurred.png"),
            "-q",
            "Rate the quality of this image.",
            "--json",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["final_answer"] in {"Bad", "Poor"}
    assert 1.0 <= document["quality_score"] <= 2.5
    assert set(document["level_distribution"]) == {"Bad", "Poor", "Fair", "Good", "Excellent"}
    assert document["plan"]["query_type"] == "IQA"
    assert document["executor_evidence"]["tool_logs"]


def test_assess_human_output_shows_plan_evidence_answer_and_timing():
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu", "COLUMNS": "200"}
    result = runner.invoke(
        app,
        ["assess", str(REPO / "examples/i03_blurred.png"), "-q", "Is the image blurry?"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    for expected in ("Plan: IQA", "Distortions:", "Blurs", "Answer: Yes", "Why:", "Time:"):
        assert expected in result.stdout


def test_assess_missing_image_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["assess", str(tmp_path / "none.png"), "-q", "Rate it"])
    assert result.exit_code == 1
    assert "image not found" in result.output


def test_assess_refuses_an_overlong_query_before_storing_a_run(tmp_path):
    """One character past the limit is one line and exit 1, and no database is even made;
    a query at the limit is read (its plan stored)."""
    from agentic_iqa.query import MAX_QUERY_CHARS

    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DATABASE_URL": url}
    image = str(REPO / "examples/i03_reference.png")
    query = "Rate the quality of this image. " + "x" * MAX_QUERY_CHARS
    result = runner.invoke(app, ["assess", image, "-q", query[: MAX_QUERY_CHARS + 1]], env=env)
    assert result.exit_code == 1
    assert f"{MAX_QUERY_CHARS + 1:,} characters long: at most {MAX_QUERY_CHARS:,}" in result.output
    assert not (tmp_path / "runs.sqlite3").exists()
    result = runner.invoke(app, ["assess", image, "-q", query[:MAX_QUERY_CHARS], "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["final_answer"]


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
    result = runner.invoke(
        app,
        [
            "assess",
            str(REPO / "examples/i03_reference.png"),
            "-q",
            "Is this image noisy?",
            "--json",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        runs = connection.execute(sqlalchemy.text("SELECT status, final_answer FROM runs")).all()
        steps = (
            connection.execute(sqlalchemy.text("SELECT step FROM step_records ORDER BY id"))
            .scalars()
            .all()
        )
    assert runs == [("succeeded", json.loads(result.stdout)["final_answer"])]
    assert steps == ["plan", "distortion_analysis", "tool_selection", "tool_execution", "summarize"]


def test_distributed_without_a_broker_is_a_clear_error():
    result = runner.invoke(
        app,
        ["assess", str(REPO / "examples/i03_reference.png"), "--distributed"],
        env={"AGENTIC_IQA_BROKER_URL": ""},
    )
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
    env = {
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_WEIGHTS_DIR": str(weights_dir),
    }
    started = time.perf_counter()
    result = runner.invoke(app, ["tools", "run", "BRISQUE", str(tiny)], env=env)
    assert time.perf_counter() - started < 5
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert (
        f"error: image {str(tiny)!r} is 1x1 pixels; BRISQUE needs at least "
        f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}"
    ) in message
    assert "IndexError" not in message
    niqe = runner.invoke(app, ["tools", "run", "niqe", str(small), "--no-fallback"], env=env)
    assert niqe.exit_code == 1
    assert "is 64x64 pixels; NIQE needs at least 96x96" in " ".join(niqe.output.split())
    brisque = runner.invoke(app, ["tools", "run", "BRISQUE", str(small), "--json"], env=env)
    assert brisque.exit_code == 0, brisque.output
    assert json.loads(brisque.stdout)["tool"] == "BRISQUE"


def test_assess_on_an_image_no_tool_can_read_is_one_clear_error(tmp_path):
    tiny, cut, small = _tiny_and_truncated(tmp_path)
    env = {
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'runs.sqlite3'}",
    }
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


def test_assess_with_an_unreachable_server_exits_2_before_storing_anything(tmp_path):
    """The endpoint is asked for its models first: no run row, one line, the password masked."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens
    results = tmp_path / "runs.sqlite3"
    env = {
        "AGENTIC_IQA_VLM_BACKEND": "openai",
        "AGENTIC_IQA_VLM_MODEL": "test-model",
        "AGENTIC_IQA_VLM_BASE_URL": f"http://iqa:s3cr3t-pass@127.0.0.1:{port}/v1",
        "OPENAI_API_KEY": "sk-test-0123456789",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{results}",
        "COLUMNS": "300",
    }
    image = str(REPO / "examples/i03_blurred.png")
    for extra in ([], ["--json", "--no-store"]):
        result = runner.invoke(app, ["assess", image, "-q", "Rate this image.", *extra], env=env)
        assert result.exit_code == 2, result.output
        shown = " ".join(result.output.split())
        assert f"cannot reach http://***@127.0.0.1:{port}/v1" in shown
        assert "s3cr3t-pass" not in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
    assert not results.exists()


def test_report_shows_a_planner_errors_message_redacted_in_both_outputs():
    from rich.console import Console

    from agentic_iqa.cli.render import render_state, state_document
    from agentic_iqa.state import PlannerError, initial_state, merge_state

    failure = PlannerError(
        error_type="api_error",
        backend="openai",
        message="HTTP 401 from https://bob:hunter2-secret@llm.example/v1 [Errno 111]",
    )
    state = merge_state(initial_state("Rate it.", "x.png"), {"error": failure.model_dump_json()})
    console = Console(record=True, width=300)
    render_state(state, console)
    text = console.export_text()
    assert "Planning failed: HTTP 401 from https://***@llm.example/v1 [Errno 111]" in text
    document = state_document(state)
    assert document["error"] == "HTTP 401 from https://***@llm.example/v1 [Errno 111]"
    assert document["error_details"]["error_type"] == "api_error"
    assert "hunter2" not in json.dumps(document)
    assert state_document(initial_state("Rate it.", "x.png"))["error"] is None


# -- assess: output a person reads ----------------------------------------------------------------


def test_assess_output_says_plan_and_distortions_once_and_never_wraps_in_a_pipe():
    env = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu", "COLUMNS": "80"}
    result = runner.invoke(
        app,
        [
            "assess",
            str(REPO / "examples/i03_blurred.png"),
            "-q",
            "Is the image blurry and noisy?",
            "--no-store",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    plan = "Plan: IQA, scope whole image, distortions: Blurs, Noise (explicit), No-Reference"
    assert plan in lines
    blur = next(line for line in lines if line.startswith("  Blurs:"))
    assert re.fullmatch(
        r"  Blurs: extreme - edges and fine texture are smeared \(edge width "
        r"[\d.]+ px\)\.",
        blur,
    )
    assert re.fullmatch(
        r"  Noise: none - flat areas are clean \(noise sigma [\d.]+ in flat "
        r"areas\)\.",
        next(line for line in lines if line.startswith("  Noise:")),
    )
    assert "Blurs severe" not in result.stdout and "{'Global'" not in result.stdout
    # Not a terminal: no line is cut at 80 columns, however long.
    why = next(line for line in lines if line.startswith("Why: "))
    # PIQE saturates on this image (raw 100): named as no evidence, never cited as the reason.
    # Then what measured it: PIQE, in place of BRISQUE, whose parameter file is not here.
    assert len(why) > 80 and why.endswith(
        "Not used as evidence: PIQE 1.00/5 for the whole image (at the end of its scale, so "
        "it carries no information). PIQE stood in for BRISQUE (its parameter file "
        "brisque_svm_weights.pth is not installed: `agentic-iqa tools download BRISQUE` "
        "fetches it, or set AGENTIC_IQA_WEIGHTS_DIR to a folder holding it)."
    )
    assert next(line for line in lines if line.startswith("Time: ")).endswith(" ms")


def test_plan_line_names_distortions_readably():
    from agentic_iqa.cli.render import plan_line
    from agentic_iqa.state import PlannerOutput

    flags = {
        "distortion_detection": True,
        "distortion_analysis": True,
        "tool_selection": True,
        "tool_execution": True,
    }
    inferred = PlannerOutput(
        query_type="IQA",
        query_scope="Global",
        distortion_source="Inferred",
        distortions=None,
        reference_mode="No-Reference",
        plan=flags,
    )
    assert plan_line(inferred) == (
        "IQA, scope whole image, distortions inferred from the image, No-Reference"
    )
    objects = PlannerOutput(
        query_type="IQA",
        query_scope=["car", "sky"],
        distortion_source="Explicit",
        distortions={"car": ["Blurs"], "sky": ["Noise", "Compression"]},
        reference_mode="Full-Reference",
        required_tool="SSIM",
        plan=flags,
    )
    assert plan_line(objects) == (
        "IQA, scope car, sky, distortions: car: Blurs; sky: Noise, "
        "Compression (explicit), Full-Reference, required tool SSIM"
    )


def slow_to_build(device: str):
    """A toy NR tool whose model takes a noticeable time to create (tests load_time)."""
    import time

    time.sleep(0.4)
    return lambda image: image.mean()


def test_the_first_tool_call_separates_the_one_time_model_load(tmp_path):
    from PIL import Image
    from rich.console import Console

    from agentic_iqa.cli.render import render_state
    from agentic_iqa.state import (
        ExecutorOutput,
        PlannerOutput,
        SummarizerOutput,
        ToolExecutionLog,
        initial_state,
        merge_state,
        state_from_json,
        state_to_json,
    )
    from iqa_tools import ToolRegistry, ToolSettings
    from tests.conftest import natural_image

    override = tmp_path / "slow.json"
    override.write_text(
        json.dumps(
            {
                "tools": {
                    "SlowToBuild": {
                        "display_name": "slow to build",
                        "factory": "tests.cli.test_commands:slow_to_build",
                        "type": "NR",
                        "lower_is_better": False,
                        "score_range": [0, 1],
                        "description": "toy tool",
                        "from_paper": False,
                        "default": False,
                        "normalization": {
                            "form": "linear",
                            "params": {"x_at_1": 0, "x_at_5": 1},
                            "source": "test",
                        },
                    }
                }
            }
        )
    )
    photo = tmp_path / "photo.png"
    Image.fromarray(natural_image(3)).save(photo)
    registry = ToolRegistry(
        ToolSettings(device="cpu", tool_cache="memory", metadata_overrides=[override])
    )
    first = registry.execute_tool("SlowToBuild", photo)
    second = registry.execute_tool("SlowToBuild", photo, use_cache=False)
    assert 0.4 <= first.load_time <= first.execution_time
    assert second.load_time == 0.0 and second.execution_time < 0.4
    assert first.to_dict()["load_time"] == first.load_time  # `tools run --json` shows it

    log = ToolExecutionLog(
        tool_name="SlowToBuild",
        object_name="Global",
        distortion="Blurs",
        raw_score=0.5,
        normalized_score=3.0,
        execution_time=2.45,
        load_time=2.4,
    )
    plan = PlannerOutput(
        query_type="IQA",
        query_scope="Global",
        distortion_source="Inferred",
        reference_mode="No-Reference",
        plan={
            "distortion_detection": False,
            "distortion_analysis": False,
            "tool_selection": False,
            "tool_execution": True,
        },
    )
    state = merge_state(
        initial_state("Rate it.", str(photo)),
        {
            "plan": plan,
            "executor_evidence": ExecutorOutput(tool_logs=[log]),
            "summarizer_result": SummarizerOutput(final_answer="Fair", quality_reasoning="ok"),
            "step_seconds": {"plan#0": 0.01, "tool_execution#0": 2.5},
        },
    )
    console = Console(record=True, width=300)
    render_state(state_from_json(state_to_json(state)), console)
    text = console.export_text()
    row = next(line for line in text.splitlines() if "SlowToBuild" in line)
    assert re.search(r"│ 50\s+│ \+2\.4 s one-time model load", row)  # 2.45 s - 2.4 s load
    assert "tool_execution#0 2500 ms (of which 2400 ms one-time model load)" in text
    # Logs stored before load_time existed read back as "not recorded".
    stored = json.loads(log.model_dump_json())
    del stored["load_time"]
    assert ToolExecutionLog.model_validate(stored).load_time is None
