"""Read the option a model chose out of its reply, and only the one it chose.

One rule for every path that reads a letter (the summarizer's multiple-choice answer, the
five-level question of scoring mode, the token log-probabilities at the letter, grading a stored
answer), because a letter the model did not choose is worse than none: none is asked again.

- **A reply that says it cannot see the image is no answer**, whatever letters it names in
  general terms ("As a text-only model I can't see the photo, but in general motion blur (B)
  is the most common", "No image was attached. Answer: D", "我无法查看图片"), and
  :func:`read_option` says so (``unread="cannot see"``), so that a run can say why.  Seeing
  it badly, or seeing no distortion in it, is seeing it ("I can't see the image clearly at
  this size", "I can't see any noise in the image").
- **A letter is read as written**: in quotes, bold or parentheses ("I'm choosing **'B'**",
  "The answer is 'D' —", "“C”", "「C」"); full-width ("答案：Ｃ" is C, read at the same
  position); an apostrophe inside a word is no quote (the "d" of "I'd", "B's").
- **A committed answer decides.**  In order: a final verdict ("Final answer: D", a JSON
  ``"final_answer": "D"``); else what the reply commits to: its first line opening with a
  letter ("C\\n\\nReasoning: ..."), a line that is only a letter, "answer is X" / "Answer: X"
  / "Rating: X", "I'd say X" / "I'll go with X" / "I'm choosing X", "It's X", "X is correct"
  / "X fits best", a closing "So B.", and the same in Chinese and Japanese ("答案是X",
  "正确答案是X", "选X", "我选择X", "我认为是X", "X是正确的", "答えはX", "正解はX", "Xを選びます").
  Options mentioned while reasoning before or after ("Between B and C ... Answer: (C)",
  "Option B (Slight) would understate", "not Excellent (A)") do not displace it.  Two
  committed answers that differ are no answer, a change of mind included ("B. Actually, it's
  C").
- **A negated option is not an answer**: "Not A", "I wouldn't say D", "rather than C", "A is
  incorrect", "D (Poor) would be generous", "Is it A? No.", "不是C", "不选B", "我不会选D"
  (:mod:`.cues` holds the words).  A negated thought reaches the end of its clause ("I don't
  really think it's C"), and a letter the reply negates anywhere is no answer unless the
  reply commits to it ("Maybe C. ... Answer: not (C)").
- **A hedge is not an answer, nor are two letters chosen together**: "A or B", "could be A
  or C", "between A and B", "B/C", "B还是C", "BかC", "I'd say B and C", "选B和C" leave the
  reply unread unless it commits elsewhere ("It could be A or B, but I'll go with B").
- **A conceded letter is not an answer**, even a committed one: a clause a concessive opens
  ("Although (B) fits the grain, ...", "While A fits best at first glance, C"), or words that
  set the letter aside ("B is tempting", "It's tempting to say D", "Slight (B) was my first
  thought", "(C) crossed my mind", "A (Noise): present, but minor", "compression (C) is
  barely noticeable").  A reply whose first line opens with a letter as the subject of a
  sentence that weighs it ("B looks plausible, but ...") has not committed to it either.
- **A reply ending on a sentence that is only a letter commits to it**: "B is tempting, but
  the smearing is more than slight. C." is C.
- Failing a commitment, a letter *mentioned* is the answer only when it is the one option
  the reply names, as its point.  A mention is a marked letter ("(B)", "**B**", "option B",
  "B. Good") or else a capital standing alone ("This image deserves a C").  It is no answer
  when it is mentioned in passing:

  - in a sentence that weighs one thing against another: a contrast ("but", "yet",
    "though", "although", "while", "whereas", "however") on either side of it ("The noise
    (B) is visible but the blur dominates", "a little blur (B), though the blocking is far
    more visible"), or the next sentence opening by setting it aside ("Option B is
    plausible; however, ...").  Which side is the point depends on meaning, so neither is
    read; the point of a sentence that opens with a concessive clause comes after it ("Though
    the grain is visible, (B) blur is the main distortion"), and a correction's after its
    "but" ("It is not A, but B").  A letter that closes its sentence after a separator ("...
    the dominant distortion is blur: B.") is a conclusion, not a mention;
  - as the label of a side point: after "some", "a little", "plus", "also", "a few", "mild"
    ("Mostly blur, with some (C) blocking artefacts"), or beside the clause its sentence
    leans on ("Mostly blocking, with grain in the shadows (A)");
  - beside another option named by its text (respelled too: "blurry", "noisy"), neither
    negated nor set aside: "Heavy blur throughout, and noise (A) in the shadows", "The noise
    (B) is visible" where B is Blur (the letter and the words disagree);
  - in parentheses after a word, where only the letters are known (the log-probability path,
    a stored answer): "The noise (B)" may label the wrong option, and nothing can tell.

  A reply that commits to nothing gives no letter, and is asked again.
- **"A" is the article** before a word ("A good image") but the option before a verb or
  conjunction ("A is correct", "A, because", "A or B").  A lower-case letter counts only as
  the whole reply ("b") or closed after a commitment ("answer: c", "i think it's c, the
  blocking ..."); "it's a ..." is the article whatever follows.
- **An option's text is an answer** only as the whole reply ("Blur") or after a commitment
  ("Answer: Blur", ``{"final_answer": "moderate noise"}``), as written or respelled: a
  common beginning of four letters or more and an inflectional ending ("Overexposed" for
  "Overexposure", "noisy" for "Noise", "blurred" for "Blur"; not "Modern" for "Moderate"),
  and only when it is exactly one option ("Noisy and blurry", "Not overexposed" are none).
- **A reply cut at the token cap** (``cut_off=True``) keeps a committed letter that is already
  written, followed by something that is not "or" ("C, because the blur", "Answer: D\\n\\nThe");
  anything less ("The answer is C", "I'd say B or") is no answer and is asked again.

:func:`locate_option` also says *where* the letter stands, so that a backend can read the
token log-probabilities at that very position; :func:`read_option` says, for a reply that
gives none, why (:data:`UNREAD_REASONS`: it cannot see the image, names several or hedges, was
cut off, commits to none).  The reading is split by concept: :mod:`.committed` (the forms that
commit), :mod:`.mentions` (passing mentions, negations, hedges), :mod:`.normalise` (width,
case, respellings), :mod:`.cues` (the words).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from . import cues
from .committed import Reply
from .mentions import Reading
from .normalise import fold_width


@dataclass(frozen=True)
class OptionMatch:
    """The option an answer gives and where its letter stands (``start`` is None when the
    option was recognised by its text, not a letter)."""

    letter: str
    start: int | None


#: Why a reply gives no option: it says it cannot see the image; it names several or hedges;
#: it stopped at the token cap before its letter was written; it commits to none.
Unread = Literal["cannot see", "several", "cut off", "none"]

#: Each :data:`Unread` kind in words, for a run's record and its warnings.
UNREAD_REASONS: dict[str, str] = {
    "cannot see": "the model says it cannot see the image",
    "several": "the reply names more than one option, or hedges between them",
    "cut off": "the reply stopped at the token limit before its option was written",
    "none": "the reply commits to no option",
}


@dataclass(frozen=True)
class OptionReading:
    """What a reply gives: the option and where it stands, or why it gives none."""

    match: OptionMatch | None
    unread: Unread | None = None

    @property
    def letter(self) -> str | None:
        """The option's letter, or None."""
        return None if self.match is None else self.match.letter

    @property
    def reason(self) -> str | None:
        """Why the reply gives no option, in words (None when it gives one)."""
        return None if self.unread is None else UNREAD_REASONS[self.unread]


def _one(readings: Iterable[Reading]) -> OptionMatch | None | Literal[False]:
    """One letter: its match (the first place it stands); several: False; none: None."""
    starts: dict[str, list[int]] = {}
    for reading in readings:
        places = starts.setdefault(reading.letter, [])
        if reading.start is not None:
            places.append(reading.start)
    if len(starts) > 1:
        return False
    if not starts:
        return None
    letter, places = next(iter(starts.items()))
    return OptionMatch(letter, min(places) if places else None)


def _decide(reply: Reply) -> tuple[OptionMatch | None, bool, Unread | None]:
    """The answer, whether the reply committed to it, and why there is none."""
    text = reply.text
    if says_it_cannot_see(text):
        return None, False, "cannot see"
    whole = re.fullmatch(
        rf"[\s*_`\"'#>\[（(]*(?P<l>{reply.letters})[)\]）]?[.):]?"
        r"[\s*_`\"'\])）]*",
        text,
        re.I,
    )
    if whole is not None:
        return OptionMatch(whole.group("l").upper(), whole.start("l")), True, None
    by_text = reply.by_text(text)
    if by_text is not None:
        return OptionMatch(by_text, None), True, None
    for tier in (reply.final, reply.committed):
        found = _one(tier())
        if found is False:
            return None, False, "several"
        if found is not None:
            return found, True, None
    if reply.hedged:
        return None, False, "several"
    for tier in (reply.marked, reply.standing):
        readings = [
            reading
            for reading in tier()
            if reading.start is not None  # these tiers read letters where they stand
            and not reply.aside(reading.start)
            and not reply.unchecked_label(reading.start)
        ]
        found = _one(readings)
        if found is False:
            return None, False, "several"
        if found is not None:
            chosen = Reading(found.letter, found.start)
            read = {reading.start for reading in readings if reading.start is not None}
            if reply.rival(chosen, read):
                return None, False, "several"
            if reply.negated_anywhere(found.letter):
                return None, False, "none"  # "Maybe C. ... Answer: not (C)"
            return found, False, None
    return None, False, "none"


def says_it_cannot_see(text: str | None) -> bool:
    """Return whether ``text`` says the model cannot see the image ("As a text-only model I
    can't see the photo", "No image was attached", "我无法查看图片")."""
    return bool(text) and cues.CANNOT_SEE.search(fold_width(text or "")) is not None


def read_option(
    text: str | None, options: Mapping[str, str], *, cut_off: bool = False
) -> OptionReading:
    """Read the option ``text`` gives and where, or why it gives none (see the rules above).

    ``options`` maps each letter to its text (the text may be empty when only letters are
    known).  ``cut_off``: the reply stopped at the token cap, so only a committed letter
    that is already written counts.
    """
    if not text or not options:
        return OptionReading(None, "none")
    reply = Reply(text, options)
    found, committed, unread = _decide(reply)
    if found is None and cut_off and unread != "cannot see":
        return OptionReading(None, "cut off")
    if found is None or not cut_off:
        return OptionReading(found, unread)
    if not committed or found.start is None:
        return OptionReading(None, "cut off")
    if cues.SETTLED.match(reply.text, found.start + 1):
        return OptionReading(found)
    return OptionReading(None, "cut off")


def locate_option(
    text: str | None, options: Mapping[str, str], *, cut_off: bool = False
) -> OptionMatch | None:
    """The option ``text`` gives and where, or None when it gives none, several, a negated
    one or a hedge, or says it cannot see the image (:func:`read_option` says which)."""
    return read_option(text, options, cut_off=cut_off).match


def parse_option(
    text: str | None, options: Mapping[str, str], *, cut_off: bool = False
) -> str | None:
    """The option letter ``text`` gives, or None (see :func:`locate_option`)."""
    return read_option(text, options, cut_off=cut_off).letter


__all__ = [
    "UNREAD_REASONS",
    "OptionMatch",
    "OptionReading",
    "Unread",
    "locate_option",
    "parse_option",
    "read_option",
    "says_it_cannot_see",
]
