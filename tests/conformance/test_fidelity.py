"""A right model gives right answers, whatever it writes: dataset jobs against a simulated model
that always knows the answer but writes the way hosted models do (``simulated_model.py``).

Every recoverable behaviour class must leave no item failed and every multiple-choice answer
right, with the rating items' fused scores in the model's own order, and the content classes
must not even need a question asked again; the unrecoverable ones fail
their items with a reason a user can act on, and a rejected key stops the job with one message.
The full table over more items is ``benchmarks/vlm_fidelity.py``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.conformance.harness import environment, run_cli_job, run_local_job, simulated
from tests.conformance.items import images, multiple_choice, scoring
from tests.conformance.simulated_model import CONTENT, Behaviour

# Left out of the README's test command (CI runs it): whole jobs against a simulated hosted model,
# through the CLI.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def items(tmp_path_factory: pytest.TempPathFactory):
    # 13 images: the pristine photo and three kinds at four levels, so the rating items
    # cover the model's five levels
    paths = images(tmp_path_factory.mktemp("conformance") / "images", 13)
    return multiple_choice(paths, 10, seed=7) + scoring(paths, 13, seed=7)


def _job(behaviour: Behaviour, items, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with simulated(behaviour, items, seed=3) as (server, model):
        for name, value in environment(behaviour, server, tmp_path).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AGENTIC_IQA_BROKER_URL")
        return replace(run_local_job(behaviour, items, tmp_path), asked_again=model.asked_again())


@pytest.mark.parametrize(
    "behaviour", [b for b in Behaviour if b.recoverable], ids=lambda b: b.value
)
def test_a_right_model_gives_right_answers_whatever_it_writes(
    behaviour, items, tmp_path, monkeypatch
):
    result = _job(behaviour, items, tmp_path, monkeypatch)
    assert [(o.item_id, o.error) for o in result.failed()] == []
    assert result.share_right() == 1.0
    assert result.scoring_srcc() >= 0.95
    assert result.job_error is None
    if behaviour in CONTENT or behaviour == Behaviour.VARIED:
        # What a step says is usable as written: no reply rejected, no replan.
        assert result.asked_again == []


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (Behaviour.ALWAYS_REFUSES, "the model refused"),
        (Behaviour.ALWAYS_TRUNCATED, "cut off at the token limit"),
    ],
)
def test_unrecoverable_replies_fail_their_items_with_what_they_were(
    behaviour, reason, items, tmp_path, monkeypatch
):
    result = _job(behaviour, items, tmp_path, monkeypatch)
    assert len(result.failed()) == len(items)
    assert all(reason in (o.error or "") for o in result.failed())


def test_a_rejected_key_stops_the_job_with_one_message_and_exit_1(items, tmp_path):
    """Through the CLI a user runs: not one failure per item, one line, the job stopped."""
    result = run_cli_job(Behaviour.BAD_KEY, items, tmp_path, workers=1)
    assert result.exit_code == 1
    assert result.job_error is not None and "HTTP 401" in result.job_error
    assert "eval resume" in result.job_error and "sk-sim-openai" not in result.job_error
    statuses = [o.status for o in result.outcomes]
    assert statuses.count("failed") <= 2  # the runs in flight when the key was refused
    assert statuses.count("cancelled") >= len(items) - 2
    assert sum(result.calls.values()) <= 2  # the rest never asked the model


def test_the_cli_job_on_a_hosted_style_model_is_right_on_every_item(items, tmp_path):
    result = run_cli_job(Behaviour.LETTERS, items, tmp_path)
    assert result.exit_code == 0
    assert result.failed() == [] and result.share_right() == 1.0


@pytest.mark.parametrize("follow_up", [True, False], ids=["follow-up", "no-follow-up"])
def test_a_vague_model_is_read_through_its_follow_up_and_never_guessed_without(
    follow_up, items, tmp_path, monkeypatch
):
    """A model whose replies name no option readably: asked once more, it names the one it
    meant, every item right; with the follow-up off, no item is given a letter."""
    from sqlalchemy import func, select

    from agentic_iqa.agents.followup import FOLLOW_UP_TASK
    from agentic_iqa.db import make_engine
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.models import VlmCall

    with simulated(Behaviour.VAGUE, items, seed=3) as (server, model):
        for name, value in environment(Behaviour.VAGUE, server, tmp_path).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AGENTIC_IQA_BROKER_URL")
        monkeypatch.setenv("AGENTIC_IQA_VLM_FOLLOW_UP", "true" if follow_up else "false")
        result = run_local_job(Behaviour.VAGUE, items, tmp_path)
        asked = model.calls.get("follow_up", 0)
    with read_scope(make_engine(f"sqlite:///{tmp_path / 'results.sqlite3'}")) as session:
        recorded = session.scalar(
            select(func.count()).select_from(VlmCall).where(VlmCall.task == FOLLOW_UP_TASK)
        )
    if follow_up:
        assert result.failed() == [] and result.share_right() == 1.0
        assert result.scoring_srcc() >= 0.95
        assert asked == recorded == len(items)  # once an item, each one recorded
    else:
        assert asked == recorded == 0
        assert result.share_right() == 0.0
        assert {o.final_answer for o in result.outcomes} == {"Unable to determine"}
