"""Issue 34: ``eval list`` shows the jobs (newest first, filtered, as text or JSON), and
``agentic-iqa models`` the backends, the configured models and their prices."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.dataset_roots import koniq_root, livec_root

runner = CliRunner()


def _submit(*args: str) -> list[str]:
    result = runner.invoke(app, ["eval", "submit", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.split()


def _listed(*args: str) -> list[dict]:
    result = runner.invoke(app, ["eval", "list", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_eval_list_shows_the_jobs_and_filters_them(tmp_path, results, livec_dir):
    koniq = koniq_root(livec_dir, tmp_path / "koniq", 3)
    livec = livec_root(livec_dir, tmp_path / "livec", 3)
    sweep = _submit("--tools", "PIQE", "--group", "g1", "--dataset", "koniq", "--root",
                    str(koniq), "--dataset", "livec", "--root", str(livec))
    (vlm,) = _submit("--mode", "vlm", "--dataset", "livec", "--root", str(livec), "--limit",
                     "2")
    every = _listed()
    assert [row["id"] for row in every] == [vlm, *reversed(sweep)]
    newest = every[0]
    assert (newest["name"], newest["group"], newest["dataset"], newest["mode"],
            newest["model"], newest["status"], newest["items"]) == (
        "livec-all-vlm-builtin", None, "livec/all", "vlm", "builtin/builtin-v1", "done",
        {"done": 2, "failed": 0, "total": 2})
    assert newest["figure"] == {"tool": None, "kind": None, "n": 0}  # 2 items: no correlation
    assert newest["cost_usd"] == 0 and newest["created_at"].startswith("20")
    metric = {row["dataset"]: row for row in every if row["group"] == "g1"}
    assert set(metric) == {"koniq10k/all", "livec/all"}
    for row in metric.values():
        assert (row["model"], row["mode"], row["items"]["total"]) == ("tools/PIQE", "tools", 3)
        assert row["figure"]["kind"] == "correlation" and -1 <= row["figure"]["srcc"] <= 1

    assert {row["id"] for row in _listed("--group", "g1")} == set(sweep)
    assert [row["id"] for row in _listed("--dataset", "LIVE-C")] == [vlm, sweep[1]]
    assert [row["id"] for row in _listed("--model", "builtin")] == [vlm]
    assert {row["id"] for row in _listed("--model", "tools/PIQE")} == set(sweep)
    assert [row["id"] for row in _listed("--limit", "1")] == [vlm]
    assert _listed("--status", "running") == []
    assert len(_listed("--status", "done")) == 3

    text = runner.invoke(app, ["eval", "list"]).stdout.splitlines()
    assert text[0].split()[:4] == ["id", "name", "group", "dataset"]
    assert len(text) == 4 and text[1].startswith(vlm[:8])
    assert "livec-all-vlm-builtin" in text[1] and "2/0/2" in text[1]
    koniq_line = next(line for line in text if "koniq10k-all-tools-PIQE" in line)
    assert "g1" in koniq_line and "3/0/3" in koniq_line and "SRCC" in koniq_line
    refused = runner.invoke(app, ["eval", "list", "--status", "finished"])
    assert refused.exit_code == 2 and "unknown --status 'finished'" in refused.output


def test_models_lists_backends_configured_models_and_prices(results, monkeypatch):
    monkeypatch.setenv("AGENTIC_IQA_PLANNER_BACKEND", "openai")
    monkeypatch.setenv("AGENTIC_IQA_PLANNER_MODEL", "gpt-4o")
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [backend["name"] for backend in document["backends"]] == [
        "builtin", "openai", "anthropic"]
    roles = {role["role"]: role for role in document["roles"]}
    assert (roles["planner"]["backend"], roles["planner"]["model"]) == ("openai", "gpt-4o")
    assert roles["planner"]["price"]["input"] == 2.5
    assert (roles["executor"]["backend"], roles["executor"]["model"]) == ("builtin",
                                                                         "builtin-v1")
    prices = {row["model"]: row for row in document["prices"]}
    assert prices["gpt-4o"]["output"] == 10.0 and prices["claude-sonnet-4-5"]["input"] == 3.0
    assert document["batch_discount"]["openai"] == pytest.approx(0.5)
    text = runner.invoke(app, ["models"]).stdout
    assert "planner" in text and "openai/gpt-4o" in text and "$2.50" in text
    assert "claude-sonnet-4-5" in text
