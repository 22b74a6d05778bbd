"""A Markdown table shows every name as written: no markup, math or TeX command gets through.

The rule: each character Markdown gives a meaning is escaped, so a job name, tool name or
caption read by GitHub or by pandoc (to LaTeX, for a paper) is text.  It is checked through the
real pandoc, where a name inside ``$...$`` would become math, in which TeX reads ``^^5c`` as a
backslash and so ``\\input``.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from agentic_iqa.reports.tables import Entry, PaperTable, markdown_escape, render_markdown

#: Names that would be markup, math or a TeX command if they were not escaped, each with the
#: way it would get through.
HOSTILE = [
    "paper $^^5cinput{/etc/hostname}$ run",  # math, then ^^5c as a backslash
    "$\\input{/etc/passwd}$",  # math with the command spelled out
    "\\input{/etc/passwd}",  # a raw TeX command
    "x^2^ and H~2~O",  # pandoc's superscript and subscript
    "{\\bf bold} [@smith2020] <b>html</b>",  # raw TeX group, a citation, HTML
    "*em* **strong** `code` _under_",  # emphasis and code
    "[link](http://example.com) ![img](x.png)",  # links and images
    "a | b # c & d; &amp;",  # a cell break, a heading mark, entities
    "$$display$$ and \\(inline\\)",  # display and parenthesised math
]


def _table(name: str) -> PaperTable:
    entry = Entry(method=name, column="", n=3, values={"srcc": 0.5}, intervals={"srcc": None})
    return PaperTable([entry], [name], [""], ["srcc"], caption=f"Jobs: {name}")


@pytest.mark.parametrize("name", HOSTILE)
def test_every_markup_character_is_escaped(name: str) -> None:
    escaped = markdown_escape(name)
    unescaped = [
        (index, char)
        for index, char in enumerate(escaped)
        if char in "\\`*_[]<>|#$^~{}@&!"
        and (index == 0 or escaped[index - 1] != "\\")
        and not (char == "\\" and index + 1 < len(escaped))
    ]
    assert unescaped == []
    # Unescaping gives the text back, whitespace folded.
    assert escaped.replace("\\\\", "\0").replace("\\", "").replace("\0", "\\") == " ".join(
        name.split()
    )


def _pandoc(markdown: str, to: str) -> str:
    pandoc = shutil.which("pandoc")
    if pandoc is None:
        pytest.fail("pandoc is not installed (.ci/run installs Debian's package pandoc)")
    return subprocess.run(
        [pandoc, "-f", "markdown", "-t", to],
        input=markdown,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


@pytest.mark.parametrize("name", HOSTILE)
def test_no_tex_command_or_math_survives_pandoc(name: str) -> None:
    latex = _pandoc(render_markdown(_table(name)), "latex")
    assert "\\input" not in latex and "^^5c" not in latex.replace("\\^{}\\^{}5c", "")
    assert "\\(" not in latex and "\\[" not in latex and "\\textsuperscript" not in latex
    assert "\\textsubscript" not in latex and "\\cite" not in latex and "\\bf " not in latex
    assert "\\href" not in latex and "\\includegraphics" not in latex
    assert "\\emph" not in latex and "\\textbf{strong}" not in latex


@pytest.mark.parametrize("name", HOSTILE)
def test_the_name_reads_back_as_written(name: str) -> None:
    """What pandoc reads of the table's first cell is the name itself, as plain text."""
    text = _pandoc(render_markdown(_table(name)), "plain")
    assert " ".join(name.split()) in " ".join(text.split())


def test_the_rule_can_fail_without_the_escapes() -> None:
    """The same name, not escaped, does reach pandoc's LaTeX as math and a command."""
    raw = "| Method | n |\n|:--|--:|\n| paper $\\input{/etc/passwd}$ run | 3 |\n"
    assert "\\input" in _pandoc(raw, "latex")
