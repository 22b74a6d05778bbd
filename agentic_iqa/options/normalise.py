"""Put a reply and an option's text in one form before they are compared: width, case, spacing.

Every change here keeps each character where it stands (one character for one), so that a
letter's position in the folded reply is its position in the reply the model wrote, which the
log-probability path reads at.
"""

from __future__ import annotations

import re

_DECORATION = " \t\r\n*_`\"'#>"
_TRAILING = " \t\r\n.!,;:*_`\"'"


def normalise_text(text: str) -> str:
    """Lower case, single spaces, no surrounding markdown, quotes or end punctuation."""
    return re.sub(
        r"\s+", " ", text.strip(_DECORATION).rstrip(_TRAILING).strip(_DECORATION)
    ).casefold()


def same_word(word: str, body: str) -> bool:
    """Return whether ``word`` is the option's own text: "slight" for severity's "Slight"."""
    return normalise_text(word) == normalise_text(body)
