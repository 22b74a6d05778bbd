"""Layout facts of an HTML page as headless Chromium lays it out at a given window width.

A page is only readable if the browser lays it out so: a screenshot shows that to a person, a
test needs numbers.  :func:`layout` opens a copy of the page with a measuring script added,
lets Chromium lay it out (``--dump-dom``, nothing fetched: the pages are self-contained) and
reads back what the script found: elements past the window's right edge, table cells whose
content is wider than the cell, each confidence interval's (a ``td.ci``, or any cell reading
"[a, b]") and each row label's number of lines, and words broken across lines.  Tests skip
where no Chromium is installed (``.ci/run`` installs Debian's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: ``AGENTIC_IQA_TEST_CHROMIUM`` names a browser binary; else the first one on PATH.
CHROMIUM = os.environ.get("AGENTIC_IQA_TEST_CHROMIUM") or next(
    (
        found
        for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
        if (found := shutil.which(name))
    ),
    None,
)


def require_chromium() -> str:
    """The browser, or a skip saying why there is none (a failure in CI, where ``.ci/run``
    installs it and ``AGENTIC_IQA_TEST_REQUIRE_SERVICES`` is set)."""
    if CHROMIUM is None:
        reason = (
            "no Chromium on PATH (apt-get install chromium; .ci/run installs it): the "
            "pages' layout cannot be measured"
        )
        if os.environ.get("AGENTIC_IQA_TEST_REQUIRE_SERVICES", "") not in {"", "0", "false"}:
            pytest.fail(reason)
        pytest.skip(reason)
    return CHROMIUM


#: Runs when the page has been parsed, so every table and figure is laid out.
_MEASURE = r"""
<script>
(() => {
  const width = window.innerWidth;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.className && typeof el.className === "string" ? "." + el.className : "");
  const where = (el) => {
    const table = el.closest("table");
    return (table ? name(table) + " " : "") + name(el) + ": "
      + (el.textContent || "").trim().slice(0, 60);
  };
  const lines = (el) => {
    const range = document.createRange();
    range.selectNodeContents(el);
    const tops = new Set();
    for (const rect of range.getClientRects()) {
      if (rect.width > 0) tops.add(Math.round(rect.top));
    }
    return tops.size;
  };
  const facts = {width: width, document_width: document.documentElement.scrollWidth,
                 past_right_edge: [], clipped_cells: [], ci_cells: [], label_cells: [],
                 tables: []};
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest("svg") && el.tagName.toLowerCase() !== "svg") continue;
    const rect = el.getBoundingClientRect();
    if (rect.width > 0 && rect.right > width + 0.5) {
      facts.past_right_edge.push({element: where(el), right: rect.right});
    }
  }
  for (const cell of document.querySelectorAll("td, th")) {
    if (cell.scrollWidth > cell.clientWidth) {
      facts.clipped_cells.push({element: where(cell), scroll: cell.scrollWidth,
                                client: cell.clientWidth});
    }
  }
  for (const cell of document.querySelectorAll("td")) {
    if (!cell.classList.contains("ci") && !/^\[.*\]$/.test(cell.textContent.trim())) continue;
    facts.ci_cells.push({element: where(cell), text: cell.textContent, lines: lines(cell)});
  }
  for (const row of document.querySelectorAll("tr")) {
    const first = row.querySelector("td.text, th.text");
    if (!first || first !== row.firstElementChild) continue;
    const text = first.textContent.trim();
    facts.label_cells.push({element: where(first), text: text, lines: lines(first),
                            width: first.clientWidth});
  }
  for (const table of document.querySelectorAll("table")) {
    const box = table.parentElement;
    facts.tables.push({table: name(table), right: table.getBoundingClientRect().right,
                       wrapper_scroll: box.scrollWidth, wrapper_client: box.clientWidth});
  }
  // Words the layout broke across lines: each word of each text node whose characters lie on
  // more than one line, a word being what lies between white space, split after each hyphen
  // (a break there is a proper one).  A long token (over 30 characters: a path, a URL, a
  // generated name; or one with "/" or "\\") may wrap anywhere and is not counted.
  facts.broken_words = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest("svg, script, style, pre#layout-facts")) continue;
    const text = node.textContent;
    const token = /\S+/g;
    for (let match = token.exec(text); match; match = token.exec(text)) {
      if (match[0].length > 30 || /[\/\\]/.test(match[0])) continue;
      const part = /[^-]+-?/g;
      for (let piece = part.exec(match[0]); piece; piece = part.exec(match[0])) {
        if (piece[0].length < 2) continue;
        const range = document.createRange();
        range.setStart(node, match.index + piece.index);
        range.setEnd(node, match.index + piece.index + piece[0].length);
        const tops = new Set();
        for (const rect of range.getClientRects()) {
          if (rect.width > 0) tops.add(Math.round(rect.top));
        }
        if (tops.size > 1) facts.broken_words.push({element: where(parent), word: match[0]});
      }
    }
  }
  const out = document.createElement("pre");
  out.id = "layout-facts";
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
})();
</script>
"""

_FACTS = re.compile(r'<pre id="layout-facts">(.*?)</pre>', re.DOTALL)


def layout(page: Path, width: int, height: int = 900) -> dict[str, Any]:
    """What Chromium measures on ``page`` in a ``width`` by ``height`` window (CSS pixels)."""
    import html

    browser = require_chromium()
    text = page.read_text(encoding="utf-8")
    assert "</body>" in text
    with tempfile.TemporaryDirectory(prefix="layout-") as folder:
        copy = Path(folder) / "page.html"
        copy.write_text(text.replace("</body>", _MEASURE + "</body>", 1), encoding="utf-8")
        done = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={Path(folder) / 'profile'}",
                "--force-device-scale-factor=1",
                f"--window-size={width},{height}",
                "--dump-dom",
                copy.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    found = _FACTS.search(done.stdout)
    assert found, f"Chromium gave no layout facts (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))
