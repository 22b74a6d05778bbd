"""Render a report's items, one by one: a sortable, filterable table and each item's trace.

The section is part of the report's one self-contained page (:func:`.report_html.render_html`):
the shown items (:mod:`.item_pages`) as one JSON document in a ``<script
type="application/json">`` (every ``<``, ``>`` and ``&`` written ``\\u003c``, ... so no text
in it, an item id of ``</script>`` included, ends the script), their thumbnails as ``data:``
URIs in it, and a small inline script (``item_pages_script.js``, no library, nothing fetched)
that draws the table from it, sorts it by a column, filters it by text and status, and opens
an item's trace over the page on a click, an Enter or a link ending ``#item=ID``.  Every
value reaches the page as text (``textContent``), never as markup.
"""

from __future__ import annotations

import html
import json
from functools import cache
from pathlib import Path
from typing import Any

from .item_pages import ALL, BEST, FAILED, SAMPLE, WORST, ItemPages

#: The section's style, beside :data:`.report_html.STYLE`: words never break inside but where
#: a word is wider than its cell; only ids and paths (``.token``) break anywhere.
ITEMS_STYLE = """
#items-section td.text, #trace td.text, #trace th.text { overflow-wrap: break-word;
  min-width: 0; }
#trace td.text { min-width: 4em; }
/* An id shows whole up to 11em (its column no narrower), a longer one breaks at the edge. */
#trace .token { overflow-wrap: anywhere; }
#items { width: 100%; font-size: 0.9em; }
#items th, #items td { padding: 0.2em 0.35em; }
#items td.id .key { display: block; max-width: 11em; overflow-wrap: break-word; }
#items td.id .why { display: block; }
#items tbody tr { cursor: pointer; }
#items tbody tr:hover, #items tbody tr:focus { background: #f8f8ff; }
#items th[data-key] { cursor: pointer; }
#items th[aria-sort="ascending"]::after { content: " \\2191"; }
#items th[aria-sort="descending"]::after { content: " \\2193"; }
#items td.thumb { padding: 2px; text-align: center; }
img.small { max-width: 56px; max-height: 56px; display: block; margin: auto; }
.placeholder { display: inline-block; max-width: 10em; white-space: normal; font-size: 0.8em;
  color: #666; background: #f2f2f2; padding: 0.3em; text-align: left; }
.filters { display: flex; flex-wrap: wrap; gap: 0.5em 1.5em; align-items: center;
  margin: 0.5em 0; }
#trace { position: fixed; inset: 0; background: rgba(0, 0, 0, 0.35); overflow-y: auto;
  z-index: 10; }
#trace .panel { background: #fff; max-width: 1040px; margin: 1.5em auto; padding: 0.5em 1.5em
  1.5em; box-sizing: border-box; width: calc(100% - 2em); }
#trace h2 { margin-top: 0.6em; }
#trace h3 { font-size: 1em; margin: 1.2em 0 0.3em; }
#trace table { max-width: 100%; }
#trace table.pairs th { width: 10em; }
#trace .pictures { display: flex; flex-wrap: wrap; gap: 1em; }
#trace figure { margin: 0; }
#trace .failure { color: #a00; font-weight: bold; }
#trace-close { float: right; margin-top: 0.8em; }
"""

_HEADERS = (
    ("id", "item", "text"),
    (None, "image", ""),
    ("truth", "MOS or truth", ""),
    ("answer", "score or answer", ""),
    ("error", "rank error or right", ""),
    ("tools", "tools", "text"),
    ("time", "time (s)", ""),
    ("cost", "cost (USD)", ""),
    ("status", "status", "text"),
)


@cache
def _script() -> str:
    return (Path(__file__).with_name("item_pages_script.js")).read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """Return ``value`` as JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&``
    (nor a line or paragraph separator) written as itself."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for char, escaped in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def _elsewhere(job_id: str) -> str:
    return f"agentic-iqa eval show {job_id[:8]} ITEM gives any item's whole trace"


def shown_note(pages: ItemPages) -> str:
    """Say how many items the page shows of how many, chosen how, and where the others are."""
    choice = pages.choice
    if choice.shown == choice.total:
        return (
            f"All {choice.total} items, worst disagreement with the truth first (the largest "
            "absolute rank error against MOS, or a wrong answer). Click a row, or open "
            "#item=ID, for its trace."
        )
    kinds = {WORST: 0, BEST: 0, FAILED: 0, SAMPLE: 0}
    for why in choice.why.values():
        kinds[why] = kinds.get(why, 0) + 1
    return (
        f"{choice.shown} of {choice.total} items (at most {choice.limit}, "
        "--items-on-page): "
        f"the {kinds[WORST]} worst disagreements with the truth (the largest absolute rank "
        f"error against MOS, or a wrong answer), the {kinds[BEST]} best, {kinds[FAILED]} "
        f"failed and a sample of {kinds[SAMPLE]} (seed {pages.seed}). "
        f"{_elsewhere(pages.job_id)}. Click a row, or open #item=ID, for its trace."
    )


def items_html(pages: ItemPages) -> str:
    """Return the report's item section: note, filters, table, trace panel, data, script."""
    statuses = sorted({str(row["status"]) for row in pages.rows})
    options = "".join(
        f'<option value="{html.escape(status)}">{html.escape(status)}</option>'
        for status in statuses
    )
    header = "".join(
        f'<th class="{css}"'
        + (f' data-key="{key}" title="sort by {html.escape(label)}"' if key else "")
        + f">{html.escape(label)}</th>"
        for key, label, css in _HEADERS
    )
    data = {
        "rows": pages.rows,
        "images": pages.thumbnails.images,
        "missing": pages.thumbnails.missing,
        "elsewhere": _elsewhere(pages.job_id) + ".",
        "all": pages.choice.shown == pages.choice.total and bool(pages.rows),
        "kinds": [WORST, BEST, FAILED, SAMPLE, ALL],
    }
    return (
        '<section id="items-section"><h2>Items, one by one</h2>'
        f'<p class="note" id="items-shown">{html.escape(shown_note(pages))}</p>'
        '<noscript><p class="note">The items\' table needs JavaScript; '
        f"{html.escape(_elsewhere(pages.job_id))}.</p></noscript>"
        '<div class="filters"><label>filter <input id="item-filter" type="search" '
        'placeholder="id, tool, answer"></label><label>status <select id="item-status">'
        f'<option value="">any</option>{options}</select></label>'
        '<span class="note" id="item-count"></span></div>'
        f'<table id="items"><thead><tr>{header}</tr></thead><tbody></tbody></table>'
        '<div id="trace" hidden><div class="panel" role="dialog" aria-label="item trace">'
        '<button id="trace-close" type="button">close</button>'
        '<div id="trace-content"></div></div></div>'
        f'<script type="application/json" id="items-data">{script_json(data)}</script>'
        f"<script>{_script()}</script></section>"
    )
