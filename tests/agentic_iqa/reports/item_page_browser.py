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
  const within = panel.hidden ? document.querySelector(__SCOPE__) || document.body : panel;
  facts.past_right_edge = [...within.querySelectorAll("*")]
    .filter((node) => !node.closest("#trace[hidden]"))
    .map((node) => ({node: node.tagName + "." + node.className,
                     right: node.getBoundingClientRect().right}))
    .filter((found) => found.right > window.innerWidth + 0.5);
  facts.row_ids = [...document.querySelectorAll("#items tbody tr")].map((tr) => tr.dataset.id);
  const visible = (img) => img.getClientRects().length > 0;
  facts.images = [...document.querySelectorAll("img")].filter(visible)
    .map((img) => ({alt: img.alt, natural: img.naturalWidth, width: img.width}));
  facts.split_words = [];
  const walker = document.createTreeWalker(within, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest("script, style, svg, noscript, pre#item-facts")) continue;
    if (parent.closest("#trace[hidden]")) continue;
    const text = node.textContent;
    for (const found of text.matchAll(/\S+/g)) {
      const box = parent.closest("td, th, p, li, h1, h2, h3, figcaption, div");
      range.setStart(node, found.index);
      range.setEnd(node, found.index + found[0].length);
      const wide = [...range.getClientRects()].reduce((sum, r) => sum + r.width, 0);
      // An id or a path wider than its box may break anywhere: nothing else may.
      const token = parent.closest(".token") !== null || /[\/\\_.:]/.test(found[0]);
      if (token && wide > box.clientWidth) continue;
      // A word: letters and digits; a line may end after a hyphen or a slash between words.
      for (const word of found[0].matchAll(/[\p{L}\p{N}]{2,}/gu)) {
        range.setStart(node, found.index + word.index);
        range.setEnd(node, found.index + word.index + word[0].length);
        const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0)
          .map((r) => Math.round(r.top)));
        if (tops.size > 1) {
          facts.split_words.push({word: word[0], in: found[0], tag: parent.tagName});
        }
      }
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


def _chromium(
    browser: str, folder: Path, width: int, height: int, *, virtual_time: bool = True
) -> list[str]:
    budget = ["--virtual-time-budget=5000"] if virtual_time else []
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
        *budget,
    ]


def browse(
    page: Path,
    width: int,
    *,
    fragment: str = "",
    actions: str = "",
    screenshot: Path | None = None,
    height: int = 900,
    scope: str = "body",
    virtual_time: bool = True,
) -> dict[str, Any]:
    """What the script finds on ``page`` at ``width`` pixels, ``#fragment`` opened, after
    ``actions``; with ``screenshot``, a PNG of the window there too.  Words and elements past
    the window's edge are looked for in the open trace, else in ``scope`` (a CSS selector).
    ``virtual_time``: Chromium waits 5 s of virtual time for the page to settle (images
    decoded), and the page's clock is virtual too; off, a timing is the wall clock's."""
    browser = require_chromium()
    text = page.read_text(encoding="utf-8")
    assert "</body>" in text
    measure = _MEASURE.replace("__ACTIONS__", json.dumps(actions)).replace(
        "__SCOPE__", json.dumps(scope)
    )
    with tempfile.TemporaryDirectory(prefix="items-") as name:
        folder = Path(name)
        copy = folder / "page.html"
        copy.write_text(text.replace("</body>", measure + "</body>", 1), encoding="utf-8")
        url = copy.as_uri() + (f"#{fragment}" if fragment else "")
        done = subprocess.run(
            [
                *_chromium(browser, folder, width, height, virtual_time=virtual_time),
                "--dump-dom",
                url,
            ],
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
