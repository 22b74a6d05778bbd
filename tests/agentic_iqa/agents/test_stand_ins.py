"""The answer says what measured the image.

Selection is offered only the tools that can run here, so without BRISQUE's parameter file the
agent measures the example with PIQE.  That choice is evidence: the tool log names the tool
wanted (BRISQUE), why it cannot run (the missing file) and how to get it; the answer's
reasoning says "PIQE stood in for BRISQUE (...)" whatever the summarizer's model wrote, and
the CLI shows it in the tools table, the answer and ``--json``.  With the parameter file in
place BRISQUE runs and nothing is said.  A tool the query names is run as named.

Real tools throughout: PIQE is weight-free; BRISQUE's and NIQE's parameter files come only
through the ``weights_dir`` fixture (the shared data folder).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.pipeline import Agents, run_inprocess
from agentic_iqa.vlm.base import VLMRequest, VLMResponse
from agentic_iqa.vlm.builtin import BuiltinClient
from iqa_tools import ToolRegistry, ToolSettings
from tests.conftest import REPO

BLURRED = REPO / "examples" / "i03_blurred.png"
REFERENCE = REPO / "examples" / "i03_reference.png"
RATE = "Rate the quality of this image."
#: What the answer says without BRISQUE's parameter file, up to where the file would go.
STOOD_IN = (
    "PIQE stood in for BRISQUE (its parameter file brisque_svm_weights.pth is not "
    "installed: `agentic-iqa tools download BRISQUE` fetches it"
)

runner = CliRunner()


def agents_with(weights: Path | None, summarizer: BuiltinClient | None = None) -> Agents:
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory", weights_dir=weights))
    client = BuiltinClient()
    return Agents(
        planner=client, executor=client, summarizer=summarizer or client, registry=registry
    )


@pytest.fixture(scope="module")
def no_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A weights folder holding nothing: BRISQUE and NIQE cannot run, PIQE can."""
    return tmp_path_factory.mktemp("no-weights")


def test_without_brisque_the_log_names_it_and_the_answer_says_piqe_stood_in(no_weights):
    state = run_inprocess(RATE, str(BLURRED), agents=agents_with(no_weights))
    logs = state["executor_evidence"].tool_logs
    assert logs
    for entry in logs:
        assert (entry.tool_name, entry.requested_tool, entry.fallback) == ("PIQE", "BRISQUE", True)
        assert entry.error.startswith(
            "BRISQUE cannot run here: its parameter file brisque_svm_weights.pth is not installed"
        )
        assert "`agentic-iqa tools download BRISQUE`" in entry.error
        assert math.isfinite(entry.normalized_score)  # PIQE's score is evidence all the same
    reasoning = state["summarizer_result"].quality_reasoning
    assert f"{STOOD_IN} into {no_weights})." in reasoning
    assert reasoning.count("stood in") == 1  # once, for both distortions PIQE scored


def test_with_brisque_installed_brisque_measures_and_nothing_is_said(weights_dir):
    state = run_inprocess(RATE, str(BLURRED), agents=agents_with(weights_dir))
    logs = state["executor_evidence"].tool_logs
    assert logs and {entry.tool_name for entry in logs} == {"BRISQUE"}
    assert all(
        not entry.fallback and entry.requested_tool is None and entry.error is None
        for entry in logs
    )
    assert "stood in" not in state["summarizer_result"].quality_reasoning


def _split_run(select_on: Agents, run_on: Agents) -> dict:
    """The agent's steps as workers take them: everything up to the tool selection on
    ``select_on``, the tools and the answer on ``run_on`` (the state travels between them)."""
    from agentic_iqa.pipeline import EXECUTE, next_step, run_step
    from agentic_iqa.state import initial_state, merge_state

    state = initial_state(RATE, str(BLURRED))
    while (step := next_step(state)) is not None:
        agents = (
            run_on
            if step == EXECUTE or "tool_execution" in state.get("steps_done", [])
            else select_on
        )
        state = merge_state(state, run_step(step, state, agents))
    return state


def test_tools_chosen_where_brisque_is_missing_and_run_where_it_is_say_so(no_weights, weights_dir):
    """Selection on a worker without BRISQUE's parameter file chooses PIQE; the worker that
    runs the tools has the file: PIQE still stood in for BRISQUE, and the answer says where
    BRISQUE was missing and what to do, where it said nothing."""
    state = _split_run(agents_with(no_weights), agents_with(weights_dir))
    logs = state["executor_evidence"].tool_logs
    assert logs and {entry.tool_name for entry in logs} == {"PIQE"}
    for entry in logs:
        assert (entry.requested_tool, entry.fallback) == ("BRISQUE", True)
        assert entry.error.startswith(
            "BRISQUE cannot run here: its parameter file brisque_svm_weights.pth is not installed"
        )
        assert entry.error.endswith(
            "(on the worker that chose the tools; the worker that ran "
            "them has it: install it on every worker)"
        )
    reasoning = state["summarizer_result"].quality_reasoning
    assert reasoning.count("PIQE stood in for BRISQUE") == 1
    assert "on the worker that chose the tools" in reasoning


def test_tools_chosen_and_run_where_brisque_is_installed_say_nothing_whatever_else(
    no_weights, weights_dir
):
    """Chosen with BRISQUE on offer: BRISQUE runs where it is installed (nothing said), and
    where it is not the registry's own fallback says why, as on one machine."""
    state = _split_run(agents_with(weights_dir), agents_with(weights_dir))
    assert state["executor_evidence"].unavailable_tools is None
    assert "stood in" not in state["summarizer_result"].quality_reasoning
    state = _split_run(agents_with(weights_dir), agents_with(no_weights))
    logs = state["executor_evidence"].tool_logs
    assert logs and all(
        entry.requested_tool == "BRISQUE"
        and entry.fallback
        and "(on the worker that chose" not in (entry.error or "")
        for entry in logs
    )


def test_a_tool_the_query_names_is_its_choice_not_a_stand_in(no_weights):
    state = run_inprocess(
        "Rate the quality of this image using PIQE.", str(BLURRED), agents=agents_with(no_weights)
    )
    assert state["plan"].required_tool == "PIQE"
    logs = state["executor_evidence"].tool_logs
    assert logs and all(entry.tool_name == "PIQE" and not entry.fallback for entry in logs)
    assert "stood in" not in state["summarizer_result"].quality_reasoning


def test_a_named_tool_that_is_missing_still_falls_back_with_the_registrys_message(no_weights):
    """The registry's fallback and its message stay as they are; the answer says it
    too."""
    state = run_inprocess(
        "Rate the quality of this image using BRISQUE.",
        str(BLURRED),
        agents=agents_with(no_weights),
    )
    logs = state["executor_evidence"].tool_logs
    assert logs and all(
        (entry.tool_name, entry.requested_tool, entry.fallback) == ("PIQE", "BRISQUE", True)
        for entry in logs
    )
    assert all(
        entry.error.startswith("BRISQUE cannot run here: missing brisque_svm_weights.pth")
        for entry in logs
    )
    assert (
        "PIQE stood in for BRISQUE (missing brisque_svm_weights.pth"
        in state["summarizer_result"].quality_reasoning
    )


def test_a_tool_the_query_rules_out_is_never_the_one_wanted(no_weights, weights_dir):
    query = "Rate the quality of this image without BRISQUE."
    missing = run_inprocess(query, str(BLURRED), agents=agents_with(no_weights))
    assert {entry.requested_tool for entry in missing["executor_evidence"].tool_logs} == {"NIQE"}
    assert (
        "PIQE stood in for NIQE (its parameter file niqe_modelparameters.mat is not "
        "installed" in missing["summarizer_result"].quality_reasoning
    )
    installed = run_inprocess(query, str(BLURRED), agents=agents_with(weights_dir))
    logs = installed["executor_evidence"].tool_logs
    assert {entry.tool_name for entry in logs} == {"NIQE"}
    assert not any(entry.fallback for entry in logs)


def test_full_reference_tool_without_a_reference_says_what_replaced_it(no_weights):
    """The FR -> NR fallback names the FR tool, why, and the chain's tool it skipped."""
    state = run_inprocess(
        "Use SSIM to judge this image.", str(BLURRED), agents=agents_with(no_weights)
    )
    logs = state["executor_evidence"].tool_logs
    assert logs and all(
        (entry.tool_name, entry.requested_tool, entry.fallback) == ("PIQE", "SSIM", True)
        for entry in logs
    )
    reasoning = state["summarizer_result"].quality_reasoning
    assert (
        "PIQE stood in for SSIM (SSIM is full-reference and no reference image was given; "
        "BRISQUE, which the fallback chain puts before PIQE, cannot run here: its parameter "
        "file brisque_svm_weights.pth is not installed"
    ) in reasoning


def test_full_reference_tools_with_a_reference_stand_in_for_nothing(no_weights):
    state = run_inprocess(
        "How good is the quality compared with the reference?",
        str(BLURRED),
        str(REFERENCE),
        agents=agents_with(no_weights),
    )
    logs = state["executor_evidence"].tool_logs
    assert logs and not any(entry.fallback for entry in logs)
    assert "stood in" not in state["summarizer_result"].quality_reasoning


class ScriptedSummarizer(BuiltinClient):
    """A summarizer model that answers without naming any tool; its prompts are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[VLMRequest] = []

    def complete(self, request: VLMRequest) -> VLMResponse:
        self.requests.append(request)
        if request.task == "answer":
            return VLMResponse(
                text=json.dumps(
                    {"final_answer": "Yes", "quality_reasoning": "The edges are smeared."}
                ),
                model="scripted",
            )
        return super().complete(request)


@pytest.mark.parametrize("query", ["Is the image blurry?", RATE])
def test_a_models_answer_is_told_and_says_it_whatever_the_model_writes(no_weights, query):
    model = ScriptedSummarizer()
    state = run_inprocess(query, str(BLURRED), agents=agents_with(no_weights, model))
    sentence = f"{STOOD_IN} into {no_weights})."
    (asked,) = [
        request for request in model.requests if request.task in {"answer", "quality_levels"}
    ]
    assert sentence in asked.user  # a real model can say it too
    reasoning = state["summarizer_result"].quality_reasoning
    assert reasoning.endswith(sentence) and reasoning.count(sentence) == 1
    if query != RATE:
        assert reasoning == f"The edges are smeared. {sentence}"


def test_stand_ins_read_plain_logs_once_per_pair_and_skip_failed_ones():
    from agentic_iqa.state import stand_in_label, stand_ins

    logs = [
        {
            "tool_name": "PIQE",
            "requested_tool": "BRISQUE",
            "fallback": True,
            "distortion": d,
            "error": "BRISQUE cannot run here: its parameter file x is not installed",
            "normalized_score": 1.0,
        }
        for d in ("Blurs", "Noise")
    ] + [
        {
            "tool": "NIQE",
            "requested_tool": "QAlign",
            "fallback": True,
            "distortion": "Blurs",
            "error": "QAlign raised",
            "normalized_score": float("nan"),
        },
        {"tool_name": "SSIM", "requested_tool": None, "fallback": False, "normalized_score": 3.0},
    ]
    assert stand_ins(logs) == [
        {
            "tool": "PIQE",
            "in_place_of": "BRISQUE",
            "reason": "its parameter file x is not installed",
            "distortions": ["Blurs", "Noise"],
            "sentence": "PIQE stood in for BRISQUE (its parameter file x is not installed).",
        }
    ]
    assert stand_in_label("BRISQUE", logs[0]["error"]) == "in place of BRISQUE (not installed)"
    assert (
        stand_in_label("SSIM", "SSIM is full-reference and no reference image was given")
        == "in place of SSIM (no reference image)"
    )


# -- the command line ------------------------------------------------------------------------


def _assess(tmp_path: Path, weights: Path, *extra: str):
    env = {
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_WEIGHTS_DIR": str(weights),
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'runs.sqlite3'}",
    }
    result = runner.invoke(app, ["assess", str(BLURRED), "-q", RATE, *extra], env=env)
    assert result.exit_code == 0, result.output
    return result, env


def test_assess_shows_the_stand_in_in_the_table_the_answer_json_and_runs_show(tmp_path, no_weights):
    result, env = _assess(tmp_path, no_weights)
    lines = result.stdout.splitlines()
    rows = [line for line in lines if "│ PIQE " in line]
    assert len(rows) == 2 and all("in place of BRISQUE (not installed)" in row for row in rows)
    why = next(line for line in lines if line.startswith("Why: "))
    assert why.endswith(f"{STOOD_IN} into {no_weights}).")
    (run,) = json.loads(runner.invoke(app, ["runs", "list", "--json"], env=env).stdout)
    shown = runner.invoke(app, ["runs", "show", run["id"]], env=env)
    assert shown.exit_code == 0, shown.output
    assert "in place of BRISQUE (not installed)" in shown.stdout
    assert f"{STOOD_IN} into {no_weights})." in shown.stdout

    document = json.loads(_assess(tmp_path, no_weights, "--json", "--no-store")[0].stdout)
    assert [
        (entry["tool"], entry["in_place_of"], entry["distortions"])
        for entry in document["stand_ins"]
    ] == [("PIQE", "BRISQUE", ["Blurs", "Contrast"])]
    assert document["stand_ins"][0]["reason"].startswith(
        "its parameter file brisque_svm_weights.pth is not installed: `agentic-iqa tools "
        "download BRISQUE`"
    )


def test_assess_with_brisque_installed_says_no_stand_in(tmp_path, weights_dir):
    result, _ = _assess(tmp_path, weights_dir)
    assert "│ BRISQUE " in result.stdout
    assert "stood in" not in result.stdout and "in place of" not in result.stdout
    document = json.loads(_assess(tmp_path, weights_dir, "--json", "--no-store")[0].stdout)
    assert document["stand_ins"] == []
