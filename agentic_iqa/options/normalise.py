"""Put a reply and an option's text in one form before they are compared: width, case, spacing.

Every change here keeps each character where it stands (one character for one), so that a
letter's position in the folded reply is its position in the reply the model wrote, which the
log-probability path reads at.
"""

from __future__ import annotations

import re

_DECORATION = " \t\r\n*_`\"'#>{}"
_TRAILING = " \t\r\n.!,;:*_`\"'{}"


def normalise_text(text: str) -> str:
    """Lower case, single spaces, no surrounding markdown, quotes or end punctuation."""
    return re.sub(
        r"\s+", " ", text.strip(_DECORATION).rstrip(_TRAILING).strip(_DECORATION)
    ).casefold()


def same_word(word: str, body: str) -> bool:
    """Return whether ``word`` is the option's own text: "slight" for severity's "Slight"."""
    return normalise_text(word) == normalise_text(body)


#: Full-width letters and digits ("Ｃ", "３") as their ASCII selves, one character for one.
_FULL_WIDTH = {
    code: code - 0xFEE0
    for code in (*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B))
}


def fold_width(text: str) -> str:
    """Write full-width letters and digits as ASCII ("答案：Ｃ" is "答案：C"), keeping every
    other character, so that positions in the result are positions in ``text``."""
    return text.translate(_FULL_WIDTH)


#: The shortest common beginning of two spellings of one word, and the endings they may
#: differ by: "overexposed" / "overexposure", "noisy" / "noise", "blurred" / "blur" (a
#: doubled last letter too), "compressed" / "compression"; not "modern" / "moderate".
STEM = 4
ENDINGS = frozenset(
    {"", "e", "s", "es", "d", "ed", "y", "ly", "ily", "ing", "ion", "ions", "ure", "ness"}
    | {"ity", "ies", "ate", "ated", "ation", "er", "ers"}
)


def respells(text: str, body: str) -> bool:
    """Return whether ``text`` is the option's text ``body`` in other endings, word for word
    ("Overexposed" for "Overexposure", "noisy" for "Noise"): a common beginning of at least
    :data:`STEM` letters, then one of :data:`ENDINGS` each; a shorter word must be the same."""
    said, own = normalise_text(text).split(), normalise_text(body).split()
    if not said or len(said) != len(own):
        return False
    return all(_same_stem(a, b) for a, b in zip(said, own, strict=True))


def _same_stem(a: str, b: str) -> bool:
    if a == b:
        return True
    if not (a.isalpha() and b.isalpha()):
        return False
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    if common < STEM:
        return False
    last = a[common - 1]
    return all(
        ending in ENDINGS or (ending[:1] == last and ending[1:] in ENDINGS)
        for ending in (a[common:], b[common:])
    )
