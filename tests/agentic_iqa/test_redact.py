"""Credentials are masked in any text that leaves the process."""

from __future__ import annotations

import logging

import pytest

from agentic_iqa.redact import RedactingFilter, redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:KEY123@host/v1", "http://***@host/v1"),
        ("redis://:hunter2@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
        ("postgresql+psycopg://app:pa%40ss@db:5432/iqa", "postgresql+psycopg://***@db:5432/iqa"),
        ("https://token@example.org/x?api_key=abc&x=1", "https://***@example.org/x?***"),
        ("Authorization: Bearer sk-abcdefghijkl", "Authorization: Bearer ***"),
        ("http://host:8000/v1 (no credentials)", "http://host:8000/v1 (no credentials)"),
        ("mail me at someone@example.org", "mail me at someone@example.org"),
        ("PASSWORD=hunter22 in a DSN", "PASSWORD=*** in a DSN"),
        ("X-API-KEY: abcdefgh1234", "X-API-KEY: ***"),
        # IGNORECASE matches the dotless i for i: a header spelled with it is masked too.
        ("x-ap\u0131-key: abcdefgh1234", "x-ap\u0131-key: ***"),
        (
            '{"reasoning": "BeArEr abcdefgh1234 leaked", "url": "s3://k:v@b/x"}',
            '{"reasoning": "BeArEr *** leaked", "url": "s3://***@b/x"}',
        ),
    ],
)
def test_urls_and_tokens_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_values_of_key_variables_are_masked_wherever_they_appear(monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    monkeypatch.setenv("AGENTIC_IQA_PLANNER_API_KEY", "planner-key-999")
    monkeypatch.setenv("SHORT_KEY", "abc")  # too short to search for: common words survive
    text = "401: invalid x-api-key sk-ant-secret-value; planner used planner-key-999; abc"
    assert redact(text) == "401: invalid x-api-key ***; planner used ***; abc"
    assert redact(None) is None and redact("") == ""


def test_log_records_are_redacted_by_the_filter(caplog) -> None:
    logger = logging.getLogger("agentic_iqa.test_redact")
    caplog.handler.addFilter(RedactingFilter())
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("connecting to %s", "redis://:topsecret@broker:6379/0")
        try:
            raise RuntimeError("bad url http://u:p4ssw0rd@h/v1")
        except RuntimeError:
            logger.exception("failed")
    text = caplog.text
    assert "topsecret" not in text and "p4ssw0rd" not in text
    assert "redis://***@broker:6379/0" in text
