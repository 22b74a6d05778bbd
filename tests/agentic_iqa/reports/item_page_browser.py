"""What headless Chromium finds on a report page with items, after its script has run.

:func:`browse` opens a copy of the page (``#item=ID`` to open an item's trace), with a script
added that, once the page has loaded (images decoded), runs a few actions (``actions``: a
JavaScript body given ``page``, the page's ``window.itemPages``) and reads back what a reader
would see: the document's width against the window's, every word drawn on two lines (a
``Range`` over the word, its rectangles' tops), every image's natural width, the table's
rows' ids, the milliseconds from navigation to the table drawn; a screenshot beside it.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.browser import require_chromium

_MEASURE = r"""
<script>
window.addEventListener("load", () => {
  const page = window.itemPages;
  const facts = {width: window.innerWidth,
                 document_width: document.documentElement.scrollWidth,
                 rendered_ms: Number(document.body.dataset.itemsRenderedMs)};
  try { (new Function("page", "facts", __ACTIONS__))(page, facts); }
  catch (error) { facts.action_error = String(error); }
  facts.document_width = Math.max(facts.document_width,
                                  document.documentElement.scrollWidth);
  const panel = document.getElementById("trace");
  facts.panel_open = !panel.hidden;
  facts.panel_text = panel.hidden ? "" : panel.innerText;
  facts.panel_width = panel.hidden ? 0 : panel.querySelector(".panel").scrollWidth;
  facts.panel_client = panel.hidden ? 0 : panel.querySelector(".panel").clientWidth;
  facts.row_ids = [...document.querySelectorAll("#items tbody tr")].map((tr) => tr.dataset.id);
  const visible = (img) => img.getClientRects().length > 0;
  facts.images = [...document.querySelectorAll("img")].filter(visible)
    .map((img) => ({alt: img.alt, natural: img.naturalWidth, width: img.width}));
  facts.split_words = [];
  const scope = panel.hidden ? document.body : panel;
  const walker = document.createTreeWalker(scope, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest("script, style, svg, noscript, pre#item-facts")) continue;
    if (!panel.hidden && !parent.closest("#trace")) continue;
    const text = node.textContent;
    for (const found of text.matchAll(/\S+/g)) {
      if (found[0].length < 2) continue;
      range.setStart(node, found.index);
      range.setEnd(node, found.index + found[0].length);
      const rects = [...range.getClientRects()].filter((r) => r.width > 0);
      const tops = new Set(rects.map((r) => Math.round(r.top)));
      if (tops.size < 2) continue;
      const box = parent.closest("td, th, p, li, h1, h2, h3, figcaption, div");
      const wide = rects.reduce((sum, r) => sum + r.width, 0);
      // An id or a path wider than its box may break anywhere: nothing else may.
      const long = parent.closest(".token") !== null && wide > box.clientWidth;
      if (!long) facts.split_words.push({word: found[0], in: parent.tagName, lines: tops.size});
    }
  }
  const out = document.createElement("pre");
  out.id = "item-facts";
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
});
</script>
"""
_FACTS = re.compile(r'<pre id="item-facts">(.*?)</pre>', re.DOTALL)


def _chromium(browser: str, folder: Path, width: int, height: int) -> list[str]:
    return [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={folder / 'profile'}",
        "--force-device-scale-factor=1",
        f"--window-size={width},{height}",
        "--virtual-time-budget=5000",
    ]


def browse(
    page: Path,
    width: int,
    *,
    fragment: str = "",
    actions: str = "",
    screenshot: Path | None = None,
    height: int = 900,
) -> dict[str, Any]:
    """What the script finds on ``page`` at ``width`` pixels, ``#fragment`` opened, after
    ``actions``; with ``screenshot``, a PNG of the window there too."""
    browser = require_chromium()
    text = page.read_text(encoding="utf-8")
    assert "</body>" in text
    measure = _MEASURE.replace("__ACTIONS__", json.dumps(actions))
    with tempfile.TemporaryDirectory(prefix="items-") as name:
        folder = Path(name)
        copy = folder / "page.html"
        copy.write_text(text.replace("</body>", measure + "</body>", 1), encoding="utf-8")
        url = copy.as_uri() + (f"#{fragment}" if fragment else "")
        done = subprocess.run(
            [*_chromium(browser, folder, width, height), "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if screenshot is not None:
            shot = folder / "shot.png"
            subprocess.run(
                [*_chromium(browser, folder, width, height), f"--screenshot={shot}", url],
                capture_output=True,
                timeout=120,
                check=False,
            )
            assert shot.is_file(), "Chromium wrote no screenshot"
            screenshot.write_bytes(shot.read_bytes())
    found = _FACTS.search(done.stdout)
    assert found, f"Chromium gave no facts (exit {done.returncode}): {done.stderr[-2000:]}"
    facts: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return facts
