"""Why a run read no answer, as a report counts it, and the warning a job of replies that cannot
see the image gives."""

from __future__ import annotations

import pytest

from agentic_iqa.options import UNREAD_REASONS
from agentic_iqa.reports.columns import JobColumns
from agentic_iqa.reports.report import build_report
from agentic_iqa.reports.report_text import cannot_see_warnings
from agentic_iqa.reports.unread import (
    CANNOT_SEE_WARN_AT,
    answering_model,
    cannot_see_warning,
    unread_kind,
)

BLIND = UNREAD_REASONS["cannot see"]


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (f"{BLIND}: 'No image was attached. Answer: D' (I cannot see it)", "cannot see"),
        (f"'{BLIND}: 'I can't see the photo'", "cannot see"),  # a CSV cell neutralised
        (f"attempt 1: {BLIND}: 'As a text-only model I cannot see it. C.'", "cannot see"),
        (f"attempt 1: no quality level in 'Hmm'; attempt 2: {BLIND}: 'No image.'", "cannot see"),
        (
            f"attempt 1: the reply named no level readably ('Hmm'); {BLIND}: 'No image here'",
            "cannot see",
        ),  # a follow-up question's reply, after the first
        ("cannot see", "cannot see"),  # already a kind, as runs.unread holds it
        (f"attempt 1: {UNREAD_REASONS['several']}: 'A or B'", "other"),
        (UNREAD_REASONS["none"], "other"),
        (UNREAD_REASONS["cut off"], "other"),
        ("the model chose none of the options: I cannot see the image", "other"),
        (f"attempt 1: the model declined: 'I will not say {BLIND}'", "other"),
        (f"attempt 1: {BLIND}: 'no image'; attempt 2: no quality level in 'Hmm'", "other"),
        ("other", "other"),
        ("", None),
        ("  ", None),
        (None, None),
    ],
)
def test_a_reason_is_cannot_see_only_when_the_reader_said_so(
    reason: str | None, kind: str | None
) -> None:
    """The kind comes from how the summarizer's reason opens (or its last attempt's), never from
    words a reply quoted inside another reason."""
    assert unread_kind(reason) == kind


def test_the_warning_starts_at_three_items_and_names_the_model() -> None:
    assert CANNOT_SEE_WARN_AT == 3
    assert cannot_see_warning(2, 2, "openai/gpt-4o") is None
    assert cannot_see_warning(0, 0, None) is None
    warning = cannot_see_warning(3, 1000, "openai/gpt-4o")
    assert warning is not None
    assert warning.startswith("3 items (0.3% of 1000 done): the model (openai/gpt-4o) says it")
    assert "a text-only model, or a server or proxy that drops them" in warning
    assert "`max_image_side`" in warning
    million = cannot_see_warning(3, 1_000_000, None)
    assert million is not None and million.startswith("3 items (0.0003% of 1000000 done)")
    unnamed = cannot_see_warning(4, 0, None)
    assert unnamed is not None and unnamed.startswith("4 items: the model says it cannot see")


def test_the_answering_model_is_the_summarizers() -> None:
    roles = {
        "planner": {"backend": "openai", "model": "gpt-4o-mini"},
        "summarizer": {"backend": "openai", "model": "gpt-4o"},
    }
    assert answering_model({"roles": roles}) == "openai/gpt-4o"
    assert answering_model({"roles": {"planner": roles["planner"]}}) == "openai/gpt-4o-mini"
    assert answering_model({"roles": {}}) is None
    assert answering_model(None) is None


def _row(item: str, status: str, unread: str | None) -> dict[str, object]:
    return {"item_id": item, "status": status, "unread": unread, "final_answer": "B"}


def test_a_report_of_rows_counts_done_items_by_why_none_was_read() -> None:
    """Exported rows (a CSV read back: text cells) tally the same as the database's columns; a
    failed item's reason is not an answer's and is not counted."""
    rows = [
        _row("a", "done", f"{BLIND}: 'no image'"),
        _row("b", "done", f"'{BLIND}: 'no image'"),
        _row("c", "done", f"attempt 1: {BLIND}: 'no image'"),
        _row("d", "done", f"attempt 1: {UNREAD_REASONS['several']}: 'A or B'"),
        _row("e", "done", ""),
        _row("f", "done", None),
        _row("g", "failed", f"{BLIND}: 'no image'"),
    ]
    columns = JobColumns.from_rows(rows, identities=False)
    assert dict(columns.unread) == {"cannot see": 3, "other": 1}
    report = build_report(columns, bootstrap=0)
    assert report["unread"] == {"total": 4, "cannot_see": 3, "other": 1, "warn_at": 3}
    job = {"configuration": {"roles": {"summarizer": {"backend": "vllm", "model": "llama3"}}}}
    (warning,) = cannot_see_warnings(job, report)
    assert warning.startswith("3 items (50% of 6 done): the model (vllm/llama3) says")
    fewer = build_report(JobColumns.from_rows(rows[1:], identities=False), bootstrap=0)
    assert fewer["unread"]["cannot_see"] == 2 and cannot_see_warnings(job, fewer) == []
    assert cannot_see_warnings({"backend": "openai", "model": "gpt-4o"}, report)[0].startswith(
        "3 items (50% of 6 done): the model (openai/gpt-4o) says"
    )
