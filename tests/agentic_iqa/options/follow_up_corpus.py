"""What a model answers when asked once more which option its unreadable reply chose.

For the replies of :mod:`.reply_corpus` that the reader leaves unread (and that the summarizer
would ask about: not cut off, not saying it cannot see the image), the follow-up reply a hosted
model writes to :data:`agentic_iqa.prompts.FOLLOW_UP_SYSTEM` ("one letter, or NONE"), and the
letter a careful grader takes from that follow-up (None: it chose none).  Written by hand, in the
forms models use for a one-letter answer (a bare letter, bold, "The answer is B.", "B. Blur", a
sentence), including follow-ups that still commit to nothing ("B or C", "NONE").

A reply listed nowhere here is taken to be answered "NONE" (graded None): the model, asked
which option its reply chose, says none.  Every entry was written after the reader, so its
figures are in-sample (``studies/letter_reading.py`` says so).
"""

from __future__ import annotations

#: First reply (as in the reply corpus) -> (the follow-up's reply, the letter graded from it).
FOLLOW_UPS: dict[str, tuple[str, str | None]] = {
    # -- replies that commit to an option a grader reads from their words ------------------
    "The image quality is Good.": ("B", "B"),
    "I'd describe the quality as fair overall.": ("C", "C"),
    "The quality seems Good to me, though some might argue for Fair.": ("B, Good.", "B"),
    "No, there is no visible noise.": ("B", "B"),
    "| Option | Verdict |\n|---|---|\n| A | no |\n| B | **yes** |": ("**B**", "B"),
    "The noise (A) is visible but the blur dominates.": ("B", "B"),
    "Option A (noise) is present but minor; the main issue is the blur.": ("B.", "B"),
    "There is a little blur (B), though the JPEG blocking is far more visible.": ("C", "C"),
    "While the noise (A) is noticeable in the shadows, it is the blur that dominates.": (
        "Answer: B",
        "B",
    ),
    "Compression (C) shows in the sky, whereas the blur covers the whole frame.": ("B", "B"),
    "Noise (A) is present but minor. The blur is what stands out.": ("B (Blur)", "B"),
    "(C) compression visible, but blur is main.": ("B", "B"),
    "The exposure would merit an A, but the heavy noise pulls it down to C.": ("C", "C"),
    "Some noise in the sky (A), but the road (C) is the blurriest region.": ("C", "C"),
    "Mostly blur, with some (C) blocking artefacts": ("B", "B"),
    "Mostly compression, with a little (B) softness at the edges.": ("C", "C"),
    "Heavy blur throughout, plus some noise (A) in the shadows.": ("B. Blur", "B"),
    "Mostly blocking, with grain in the shadows (A).": ("My reply chose C.", "C"),
    "Blocking artefacts dominate; there is also slight grain (A) in the sky.": ("C", "C"),
    "Mainly smearing from camera shake; a few noisy pixels (A) in the corners.": (
        "The answer is B.",
        "B",
    ),
    "The blur is strong; the noise (A) is a minor point.": ("B", "B"),
    "The main problem is blur; compression (C) is barely noticeable.": ("**B**", "B"),
    "Along with mild grain (A), there is strong blocking in the sky.": ("C — compression.", "C"),
    "Strong blocking in the sky, as well as some (B) softness.": ("C", "C"),
    "**Main issue:** blur. Minor: noise (A).": ("B", "B"),
    "Mostly blur, with some (Ｃ) blocking artefacts": ("Ｂ", "B"),
    # -- replies that commit to none: asked, a model may choose, or still hedge -----------
    "A or B": ("A or B", None),
    "Probably B, maybe C.": ("B", "B"),
    "I'd say it's either B or C.": ("B or C", None),
    "so it's b or c.": ("b", "B"),
    "The image is sharp and well exposed.": ("A", "A"),
    "It depends on the viewing distance.": ("C", "C"),
    "B is tempting, but the smearing is more than slight.": ("C", "C"),
    "B looks plausible, but the smearing is more than slight.": ("C. Moderate", "C"),
    "It's tempting to say D, yet the subject is still recognisable.": ("C", "C"),
    "The noise (B) is visible but the blur dominates.": ("B", "B"),
    "it's a good image overall.": ("b", "B"),
    "i think it's a bit soft.": ("C", "C"),
    "可能是B或C。": ("C", "C"),
    "Either B or C.": ("None.", None),
    "Hard to say, it could be A or C": ("I can't choose between them.", None),
    "Somewhere between A and B.": ("NONE", None),
    "Not A.": ("NONE", None),
    "I wouldn't say D.": ("none", None),
}


def follow_up_for(text: str) -> tuple[str, str | None]:
    """Return the follow-up a model answers after ``text``, and its graded letter."""
    return FOLLOW_UPS.get(text, ("NONE", None))


__all__ = ["FOLLOW_UPS", "follow_up_for"]
