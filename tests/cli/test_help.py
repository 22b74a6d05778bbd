"""Help into a pipe or a file is plain text at full width: nothing cut to 80
columns with an ellipsis, no boxes, and a docstring's reST ````code```` as `code`.

The CLI runs in its own process with stdout a pipe, as ``agentic-iqa eval submit --help >
help.txt`` would; :func:`agentic_iqa.cli.readable`, which turns docstrings into help, is
tested on the rule itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentic_iqa.cli import PIPE_WIDTH, readable
from tests.conftest import REPO


def _help(*command: str, columns: str | None = None) -> str:
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    result = subprocess.run(
        [sys.executable, "-m", "agentic_iqa", *command, "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(
    "command", [("eval", "submit"), ("eval", "estimate"), ("eval", "resume"), ("tools", "run"), ()]
)
def test_help_into_a_pipe_is_plain_text_at_full_width(command):
    text = _help(*command)
    assert "Usage: agentic-iqa" in text
    assert "…" not in text and "``" not in text
    assert not set(text) & set("╭╮╰╯│─━┃")  # no panels
    assert "\x1b[" not in text  # no colour
    assert max(len(line) for line in text.splitlines()) <= PIPE_WIDTH
    if command == ("eval", "submit"):
        words = " ".join(text.split())
        assert "(default: configs/model_backends.yaml, AGENTIC_IQA_VLM_BACKEND)" in words
        assert max(len(line) for line in text.splitlines()) > 80  # not cut to 80 columns
    if command == ("eval", "resume"):
        assert "taken over now with `--take-over`." in " ".join(text.split())


def test_help_follows_columns_when_it_is_set():
    narrow = _help("eval", "submit", columns="70")
    assert max(len(line) for line in narrow.splitlines()) <= 70
    assert "configs/model_backends.yaml" in narrow and "…" not in narrow


def test_a_docstring_becomes_paragraphs_of_one_line_with_markdown_code():
    text = """First line
    goes on here.

    A paragraph with ``code`` and ``--flag X``
    over two lines.

    Items:
    - one
    - two
      still two"""
    assert readable(text) == (
        "First line goes on here.\n\n"
        "A paragraph with `code` and `--flag X` over two lines.\n\n"
        "Items:\n- one\n- two\n  still two"
    )
    assert readable("\b\nkept\nas is") == "\b\nkept\nas is"
    assert readable(None) is None and readable("") == ""
