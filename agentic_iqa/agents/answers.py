"""Reading an option out of a model's answer, only where it stands as an option.

A remote model answers in prose as often as with a bare letter, and prose is full of words that
look like letters: the article in "This is a good image" is not option A.  So a letter counts only
in the shapes people write options in: the whole answer (``B``, ``(B)``, ``B.``, ``**B**``), a
leading ``B.`` / ``B)`` / ``B:``, ``Answer: B``, a parenthesised ``(B)`` or a bold ``**B**``
anywhere, or the whole answer being the option's text ("Blur" when option B is "Blur").  Two
different options found this way make the answer ambiguous; no option found makes it
unparseable.  Either way the caller gets ``None`` and asks again, never a guessed letter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_DECORATION = " \t\r\n*_`\"'"
_TRAILING = " \t\r\n.!,;:*_`\"'"


def _normalise_text(text: str) -> str:
    """Lower case, single spaces, no surrounding markdown, quotes or end punctuation."""
    return re.sub(r"\s+", " ", text.strip(_DECORATION).rstrip(_TRAILING).strip(_DECORATION)
                  ).casefold()


def parse_option(text: str | None, options: Mapping[str, str]) -> str | None:
    """The option letter ``text`` gives, or None when it gives none or several.

    ``options`` maps each letter to its text (the text may be empty when only letters are
    known).  Letters are compared upper case; only letters in ``options`` count.
    """
    if not text or not options:
        return None
    letters = {letter.upper(): body for letter, body in options.items()}
    alternatives = "|".join(re.escape(letter) for letter in sorted(letters))
    stripped = text.strip()

    whole = re.fullmatch(rf"[\s*_`\"']*\(?({alternatives})\)?[.):]?[\s*_`\"']*", stripped,
                         flags=re.IGNORECASE)
    if whole is not None:
        return whole.group(1).upper()

    bare = _normalise_text(stripped)
    by_text = [letter for letter, body in letters.items()
               if body and _normalise_text(body) == bare]
    if len(by_text) == 1:
        return by_text[0]

    end = r"(?=$|[\s.,;:!)\]*_`\"'\-\u2013\u2014])"
    found: set[str] = set()
    leading = re.match(rf"[\s*_`\"']*\(?({alternatives})[.):]\s", stripped + " ")
    if leading is not None:
        found.add(leading.group(1))
    stated = (rf"(?i:\banswer\b(?:\s+is)?)[\s:*_`\"'=\-]*\(?((?i:{alternatives}))\)?"
              rf"(?=\s*(?:$|[.,;:!)\]*_`\"'\-\u2013\u2014]))")
    found.update(match.group(1).upper() for match in re.finditer(stated, stripped))
    found.update(re.findall(rf"\(({alternatives})\){end}", stripped))
    found.update(re.findall(rf"\*\*\(?({alternatives})[.)]?\*\*", stripped))
    return found.pop() if len(found) == 1 else None


__all__ = ["parse_option"]
