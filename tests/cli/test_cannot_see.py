"""A model that says it cannot see the image gives no answer, and a job of such replies warns.

The model is the simulated OpenAI-compatible one on a local HTTP server (the real openai SDK
talks to it), answering some items' summarizer or rating requests as a text-only model would:
"As a text-only model I can't see the photo, but B is common".  The job runs through the CLI
(``eval submit --mode vlm``, here) on SQLite and on PostgreSQL, and ``eval status``, ``eval
report`` (text, JSON, HTML) and ``eval export`` are read as a user reads them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import upgrade
from agentic_iqa.options import UNREAD_REASONS
from agentic_iqa.reports.export import ROW_COLUMNS
from agentic_iqa.reports.unread import CANNOT_SEE_WARN_AT
from agentic_iqa.vlm.images import encode_image
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply
from tests.cli.conftest import csv_rows
from tests.conformance.items import Item, images, multiple_choice, teach, write_manifest
from tests.conformance.simulated_model import (
    Behaviour,
    SimulatedModel,
    Truth,
    _openai_completion,
    _openai_parts,
    _role,
    image_digest,
)
from tests.conftest import scratch_postgres

runner = CliRunner()

MODEL = "sim-text-only"
BLIND = "As a text-only model I can't see the photo, but B is common"
HEDGED = "It is A or B, I cannot tell which."
CANNOT_SEE = UNREAD_REASONS["cannot see"]


class PartlyBlind:
    """The simulated model, except that it says it cannot see the images in ``blind`` (its
    summarizer's answer, or its five-level rating) and hedges between two letters on those in
    ``hedged``, every time it is asked."""

    def __init__(self, model: SimulatedModel, blind: set[str], hedged: set[str]) -> None:
        self.model, self.blind, self.hedged = model, blind, hedged

    def __call__(self, request: Recorded) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        system, _user, sent = _openai_parts(body)
        role = _role(system)
        digest = image_digest(sent[0]) if sent else ""
        text = None
        if role == "answer" and digest in self.blind:
            text = json.dumps({"final_answer": BLIND, "quality_reasoning": BLIND})
        elif role == "answer" and digest in self.hedged:
            text = json.dumps({"final_answer": HEDGED, "quality_reasoning": "Hard to say."})
        elif role == "levels" and digest in self.blind:
            text = BLIND.replace("B is common", "C (Fair) is typical")
        if text is None:
            return self.model(request)
        return Reply(200, _openai_completion(text, "stop", None, None, body.get("model")))


def _digest(path: Path) -> str:
    return image_digest(encode_image(path, 1024)[1])


@pytest.fixture(params=["sqlite", "postgresql"])
def database(
    request: pytest.FixtureRequest, results: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The CLI's results database, of each dialect, and a key for the simulated model."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-key")
    if request.param == "sqlite":
        yield results
        return
    with scratch_postgres(request.getfixturevalue("postgres_admin_url")) as url:
        upgrade(url)
        monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        yield url


def _items(folder: Path, count: int, rated: int = 0) -> list[Item]:
    """``count`` questions on distinct photos, then ``rated`` rating requests on others."""
    paths = images(folder / "images", count + rated)
    questions = multiple_choice(paths[:count], count, seed=3)
    rating = [
        Item(f"rate{i}", path, Truth("Rate the quality of this image.", level=3))
        for i, path in enumerate(paths[count:])
    ]
    return questions + rating


def _run(folder: Path, items: list[Item], blind: list[Item], hedged: list[Item]) -> tuple[str, str]:
    """Run the job through ``eval submit`` on the partly blind model; return its id and the
    lines it ended with (stderr)."""
    model = SimulatedModel(Behaviour.CLEAN)
    teach(model, items)
    responder = PartlyBlind(
        model, {_digest(i.image) for i in blind}, {_digest(i.image) for i in hedged}
    )
    manifest = write_manifest(items, folder / "manifest.csv")
    with FakeAPIServer(responder) as server:
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                str(manifest),
                "--mode",
                "vlm",
                "--backend",
                "openai",
                "--model",
                MODEL,
                "--base-url",
                f"{server.url}/v1",
                "--no-vlm-cache",
            ],
        )
    assert result.exit_code == 0, result.output
    return result.stdout.split()[-1], " ".join(result.stderr.split())


def _cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_a_job_whose_model_says_it_cannot_see_warns_and_names_the_model(
    tmp_path: Path, database: str
) -> None:
    """Three questions and a rating answered "I can't see the photo, but B is common" are four
    items without an answer, each saying why; a hedge is unread for another reason, and is not
    counted with them.  Status, report and export say so, and the warning names the model."""
    items = _items(tmp_path, 5, rated=1)
    blind, hedged, clear = [*items[:3], items[5]], [items[3]], items[4]
    job, ended = _run(tmp_path, items, blind, hedged)

    status = json.loads(_cli("eval", "status", job, "--json").stdout)
    assert status["counts"] == {"done": 6}
    assert status["cannot_see"] == 4
    (warning,) = status["warnings"]
    assert warning.startswith("4 items (67% of 6 done): the model (openai/sim-text-only)")
    assert "may not be receiving the images (a text-only model" in warning
    text = " ".join(_cli("eval", "status", job).stdout.split())
    assert f"warning: {warning}" in text
    assert f"warning: {warning}" in ended  # the lines a job run here ends with

    report = json.loads(_cli("eval", "report", job, "--json", "--bootstrap", "0").stdout)
    assert report["unread"] == {"total": 5, "cannot_see": 4, "other": 1, "warn_at": 3}
    assert [w for w in report["job"]["warnings"] if "cannot see" in w] == [warning]
    assert report["mcq"]["no_answer"] == 4  # the three blind questions and the hedge
    shown = " ".join(_cli("eval", "report", job, "--bootstrap", "0").stdout.split())
    assert f"Warning: {warning}" in shown
    page = tmp_path / "report.html"
    _cli("eval", "report", job, "--bootstrap", "0", "--html", str(page))
    assert "4 items (67% of 6 done): the model (openai/sim-text-only) says" in (
        page.read_text(encoding="utf-8")
    )

    rows = {row["item_id"]: row for row in csv_rows(_cli("eval", "export", job, "-o", "-").stdout)}
    header = list(next(iter(rows.values())))
    assert header[: len(ROW_COLUMNS)] == list(ROW_COLUMNS)
    assert header.index("unread") == header.index("reasoning") + 1
    for item in blind:
        row = rows[item.id]
        assert row["final_answer"] == "Unable to determine", row
        assert CANNOT_SEE in row["unread"] and "can't see the photo" in row["unread"]
    assert rows[items[0].id]["unread"].startswith(CANNOT_SEE)
    assert rows[items[5].id]["unread"].startswith("attempt 1: " + CANNOT_SEE)
    assert rows[hedged[0].id]["unread"] and CANNOT_SEE not in rows[hedged[0].id]["unread"]
    assert rows[hedged[0].id]["final_answer"] == "Unable to determine"
    assert rows[clear.id]["unread"] == ""
    assert rows[clear.id]["final_answer"] == clear.truth.answer
    jsonl = [
        json.loads(line)
        for line in _cli("eval", "export", job, "--format", "jsonl", "-o", "-").stdout.splitlines()
    ]
    assert sum(1 for row in jsonl if (row["unread"] or "").startswith(CANNOT_SEE)) == 3
    assert sum(1 for row in jsonl if row["unread"] is None) == 1


def test_two_replies_that_cannot_see_and_hedges_do_not_warn(tmp_path: Path, database: str) -> None:
    """Two items of a model saying it cannot see are one short of the warning; hedges (several
    letters) are unread for another reason and never count towards it."""
    assert CANNOT_SEE_WARN_AT == 3
    items = _items(tmp_path, 5)
    job, ended = _run(tmp_path, items, blind=items[:2], hedged=items[2:4])
    assert "cannot see" not in ended and "done" in ended

    status = json.loads(_cli("eval", "status", job, "--json").stdout)
    assert (status["counts"], status["cannot_see"], status["warnings"]) == ({"done": 5}, 2, [])
    assert "warning" not in _cli("eval", "status", job).stdout
    report = json.loads(_cli("eval", "report", job, "--json", "--bootstrap", "0").stdout)
    assert report["unread"] == {"total": 4, "cannot_see": 2, "other": 2, "warn_at": 3}
    assert not [w for w in report["job"]["warnings"] if "cannot see" in w]
    assert "cannot see the image" not in _cli("eval", "report", job, "--bootstrap", "0").stdout
