"""Write the report's figures out: standalone SVG and PDF files, or inline SVG for a page.

The figures themselves are drawn in :mod:`.figures`; here they become bytes, with their title
as metadata, fonts embedded (:data:`.figures.RC`), and for a page the ids matplotlib numbers
alike in every figure made unique.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..redact import redact
from .figures import RC

if TYPE_CHECKING:
    from .figures import NamedFigure

#: The file formats a figure is written in (``--figures DIR``).
FORMATS = ("svg", "pdf")


def svg(named: NamedFigure) -> str:
    """The figure as a standalone SVG document, text as escaped SVG text, titled."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({**RC, "svg.hashsalt": named.name}):
        named.figure.savefig(
            buffer, format="svg", metadata={"Title": redact(named.title) or "", "Date": None}
        )
    return buffer.getvalue()


def pdf(named: NamedFigure) -> bytes:
    """The figure as a PDF, its fonts embedded as TrueType (:data:`RC`), titled."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context(RC):
        named.figure.savefig(
            buffer,
            format="pdf",
            metadata={"Title": redact(named.title) or "", "CreationDate": None},
        )
    return buffer.getvalue()


_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
#: The ids matplotlib numbers in every figure alike ("axes_1", "text_3"): never referred to,
#: but one page holds several figures, and an id is unique on a page.
_NUMBERED_IDS = re.compile(r'\bid="([A-Za-z][A-Za-z0-9.]*_\d+)"')


def inline_svg(named: NamedFigure) -> str:
    """The figure for an HTML page: its SVG without the XML prologue, metadata and namespace
    declarations (an HTML parser knows them), so the page names no outside address; the ids
    matplotlib numbers alike in every figure take the figure's name before them."""
    document = _METADATA.sub("", _PROLOGUE.sub("", svg(named), count=1), count=1)
    start, rest = document.split(">", 1)
    return _NAMESPACES.sub("", start) + ">" + _NUMBERED_IDS.sub(rf'id="{named.name}-\1"', rest)


def html_figure(named: NamedFigure) -> str:
    """A ``<figure>`` with the inline SVG and an escaped caption."""
    return (
        f'<figure class="plot" id="figure-{named.name}">{inline_svg(named)}'
        f"<figcaption>{html.escape(redact(named.title) or '')}</figcaption></figure>"
    )


def write_figures(
    figures: Iterable[NamedFigure], directory: str | Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """Write each figure as ``<directory>/<name>.<format>`` (the directory made if missing)
    and return the paths written."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for named in figures:
        for fmt in formats:
            path = target / f"{named.name}.{fmt}"
            if fmt == "svg":
                path.write_text(svg(named), encoding="utf-8")
            elif fmt == "pdf":
                path.write_bytes(pdf(named))
            else:
                raise ValueError(f"unknown figure format {fmt!r}: use svg or pdf")
            written.append(path)
    return written
