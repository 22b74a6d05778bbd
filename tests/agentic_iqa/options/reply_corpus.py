"""Replies written as hosted models write them, each graded by hand with the letter the model
chose (None: it chose none), for the option reader (:mod:`agentic_iqa.options`) and
``studies/letter_reading.py``.

Styles: "gpt" (GPT-4o: terse, markdown, bold), "claude" (prose that reasons, often after the
answer), "qwen" (Qwen2.5-VL: short, often a letter with its text).  ``cut`` marks a reply that
stopped at the token cap (finish_reason "length"): it is graded by what it had committed to
before the cap, so a letter still open to "or C" is None.  Graded once, before the reader was
written; a grade is changed only when the grade itself was wrong, never to fit a reader.
``held_out`` replies were written and graded after the reader, and first read by it as they
stand here: the reader was not changed for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentic_iqa.prompts import QUALITY_LEVEL_CHOICES

OPTIONS: dict[str, dict[str, str]] = {
    "quality": dict(QUALITY_LEVEL_CHOICES),
    "distortion": {"A": "Noise", "B": "Blur", "C": "Compression"},
    "severity": {"A": "None", "B": "Slight", "C": "Moderate", "D": "Severe"},
    "yesno": {"A": "Yes", "B": "No"},
    "region": {"A": "The sky", "B": "The car", "C": "The road", "D": "The trees"},
}


@dataclass(frozen=True)
class Graded:
    text: str
    expected: str | None
    category: str
    style: str
    options: str = "quality"
    cut: bool = False
    held_out: bool = False


def _group(
    category: str, style: str, *rows: tuple, cut: bool = False, held_out: bool = False
) -> list[Graded]:
    """Rows of ``(text, expected)`` or ``(text, expected, options)``."""
    return [
        Graded(row[0], row[1], category, style, *row[2:], cut=cut, held_out=held_out)
        for row in rows
    ]


CORPUS: list[Graded] = [
    *_group(
        "bare letter",
        "qwen",
        ("B", "B"),
        ("C", "C"),
        ("(D)", "D"),
        ("E.", "E"),
        ("A", "A"),
        (" C\n", "C"),
        ("B)", "B"),
        ("`A`", "A"),
        ('"D"', "D"),
        ("[C]", "C"),
        ("B", "B", "distortion"),
        ("A", "A", "yesno"),
        ("C.", "C", "severity"),
        ("A.", "A"),
    ),
    *_group(
        "bare letter",
        "gpt",
        ("**B**", "B"),
        ("**(C)**", "C"),
        ("Option C", "C"),
        ("Option (D)", "D"),
        ("Choice B.", "B"),
    ),
    *_group(
        "letter with text",
        "qwen",
        ("B. Good", "B"),
        ("C) Fair", "C"),
        ("(D) Poor", "D"),
        ("A. Excellent", "A"),
        ("E - Bad", "E"),
        ("B: Good", "B"),
        ("Good (B)", "B"),
        ("B (Good)", "B"),
        ("C – Fair", "C"),
        ("(B) Blur", "B", "distortion"),
        ("A. Noise", "A", "distortion"),
        ("C. Compression", "C", "distortion"),
        ("B. No", "B", "yesno"),
        ("D. Severe", "D", "severity"),
        ("B Good", "B"),
        ("[B] Good", "B"),
        ("B. The car", "B", "region"),
        ("A (Excellent)", "A"),
        ("A — Excellent", "A"),
    ),
    *_group(
        "letter with text",
        "gpt",
        ("**C. Fair**", "C"),
        ("**C** — Fair", "C"),
        ("**Option C: Compression**", "C", "distortion"),
    ),
    *_group(
        "option text",
        "qwen",
        ("Fair", "C"),
        ("Poor.", "D"),
        ("Blur", "B", "distortion"),
        ("**Excellent**", "A"),
        ("The car", "B", "region"),
        ("Yes", "A", "yesno"),
        ("No.", "B", "yesno"),
        ("The trees", "D", "region"),
        ("Moderate", "C", "severity"),
    ),
    *_group(
        "option text",
        "claude",
        ("The image quality is Good.", "B"),
        ("I'd describe the quality as fair overall.", "C"),
        ("The quality seems Good to me, though some might argue for Fair.", "B"),
        ("No, there is no visible noise.", "B", "yesno"),
    ),
    *_group(
        "answer marker",
        "gpt",
        ("Answer: B", "B"),
        ("**Answer:** D", "D"),
        ("Final answer: A", "A"),
        ("Answer: (B)", "B"),
        ("Final Answer: **B**", "B"),
        ("Answer - C", "C"),
        ("**Final answer: (A) Excellent**", "A"),
        ("Answer:\nB", "B"),
        ("Rating: B (Good)", "B"),
        ("Verdict: D", "D"),
        ("**Final verdict:** E (Bad)", "E"),
        ("Correct option: B", "B", "distortion"),
        ("My answer: E", "E"),
    ),
    *_group(
        "answer marker",
        "qwen",
        ("The answer is C.", "C"),
        ("The correct answer is (C) Fair.", "C"),
        ("The best option is C.", "C"),
        ("The most appropriate choice is D (Poor).", "D"),
        ("The answer is B because the edges are soft.", "B"),
        ("Answer: Blur", "B", "distortion"),
        ("The answer is: Compression", "C", "distortion"),
        ("I think the answer is A.", "A"),
        ('{"answer": "C"}', "C"),
    ),
    *_group(
        "prose",
        "claude",
        ("I'd say B.", "B"),
        ("This image deserves a C.", "C"),
        ("I would rate this image as C (Fair).", "C"),
        ("Based on the visible grain, I'd go with D.", "D"),
        ("Looking at the image, the quality is best described as B.", "B"),
        ("The image is sharp, well exposed and free of noise, so I would choose A.", "A"),
        ("Overall I'd rate it a B.", "B"),
        (
            "Given the heavy blocking artifacts, the most visible distortion is compression, "
            "option C.",
            "C",
            "distortion",
        ),
        ("Considering the tool scores and the soft edges, this looks like a D to me.", "D"),
        (
            "The photo shows noticeable motion blur across the subject, which makes B the best "
            "fit.",
            "B",
            "distortion",
        ),
        ("It's a solid B: good detail with minor noise in the shadows.", "B"),
        ("Hmm, I'd lean towards C here.", "C"),
        ("I'll go with E — the image is badly degraded.", "E"),
        ("The quality falls into category C.", "C"),
        ("My assessment: this image rates D on the scale.", "D"),
        ("Selecting B.", "B"),
        ("Definitely B.", "B"),
        ("The car (B) is the blurriest region.", "B", "region"),
        ("The sky (A) shows the most noise, not the road (C).", "A", "region"),
        (
            "After examining the image carefully, I'd rate it as Good — option B. There's minor "
            "noise but overall detail is preserved.",
            "B",
        ),
        (
            "This image is quite good overall. A would be too generous given the slight noise, "
            "so I'd choose B.",
            "B",
        ),
        (
            "Option A (Excellent) requires flawless detail, which this image lacks. Option B "
            "(Good) fits: sharp subject, mild noise. So B.",
            "B",
        ),
        (
            "The image exhibits strong blocking artifacts typical of heavy JPEG compression, "
            "while noise and blur are minimal. Therefore, the answer is C.",
            "C",
            "distortion",
        ),
        (
            "Looking at this image, I notice significant grain in the darker areas and some loss "
            "of fine detail. The colors remain reasonably accurate, and there's no obvious "
            "compression blocking.\n\nWeighing these factors, the image falls into the **Fair** "
            "category.\n\n**Answer: C**",
            "C",
        ),
        (
            "Let me work through this. The image has noticeable blur (ruling out A), but the "
            "subject is still recognizable (ruling out E). The noise level is moderate. Between "
            "C and D, the softness tips it toward D.\n\nFinal answer: D",
            "D",
        ),
        ("Je choisirais C.", "C"),
    ),
    *_group(
        "committed then reasoning",
        "claude",
        (
            "C\n\nReasoning: Option B (Slight) would understate the visible blur, while D "
            "(Severe) would overstate it.",
            "C",
            "severity",
        ),
        ("C\n\nReasoning: Option B (Slight) would understate the blur.", "C", "severity"),
        (
            "B\nExplanation: the image is not Excellent (A) because of mild noise in the shadows, "
            "but it is far from Fair (C).",
            "B",
        ),
        ("B\nExplanation: the image is not Excellent (A).", "B"),
        (
            "**B. Good**\n\nThe image is well exposed and mostly sharp. It falls short of A "
            "(Excellent) due to slight noise, but it is clearly better than C.",
            "B",
        ),
        (
            "D\n\nThe image shows heavy JPEG blocking and banding. While C (Fair) might apply to "
            "a milder case, the artifacts here are too strong.",
            "D",
        ),
        (
            "A\n\nThe photo is crisp, with accurate colours and no visible noise. None of the "
            "distortions that would push it to B or C are present.",
            "A",
        ),
        (
            "B\n\nWhy not A: slight softness at the edges. Why not C: detail is still well "
            "preserved.",
            "B",
        ),
        (
            "Answer: C\n\nOption A (Noise) is unlikely because the grain is minimal, and B (Blur) "
            "does not fit since edges are crisp.",
            "C",
            "distortion",
        ),
        (
            "The answer is B.\n\nA would require pristine detail, and C would mean clearly "
            "visible artifacts.",
            "B",
        ),
        (
            "C\n\nThe image has moderate blur. It is not severe enough for D, and certainly not "
            "as clean as B.",
            "C",
        ),
        ("E\nThe image is almost unrecognisable; even D (Poor) would be generous.", "E"),
        ("Final answer: D\n\nI considered C, but the noise is too strong.", "D"),
        ("D\n\nNot C, because the degradation is more than moderate.", "D"),
        ("C (Fair)\n\nI wouldn't say B: the shadows are noisy.", "C"),
        (
            "Based on the analysis, my answer is C.\n\nIf the image had less noise it would be B.",
            "C",
        ),
        (
            "B\n\nThe distortion analysis reports moderate blur and the tool score is 3.8, "
            "between C and B, but the visual detail supports B.",
            "B",
        ),
        ("A\n\n(B and C were considered but rejected.)", "A"),
        (
            "The image has visible noise but good detail.\n\nFinal answer: B\n\nNote that A "
            "would require no noise at all.",
            "B",
        ),
        (
            "B\n\nThe blur is the main issue. Noise (A) is minimal and compression (C) artifacts "
            "are not visible.",
            "B",
            "distortion",
        ),
    ),
    *_group(
        "committed then reasoning",
        "gpt",
        (
            "B - Good. Compared with option A, there is a small amount of noise; option C would "
            "be too harsh.",
            "B",
        ),
        (
            "**Answer: B**\n\n- A (Excellent): no, slight noise is visible\n- C (Fair): too harsh "
            "given the sharp details",
            "B",
        ),
        (
            "C\n\nReasoning: The image is noticeably soft. Option B would fit a sharper image; "
            "option D would fit a heavily degraded one.",
            "C",
        ),
        (
            "A\n\nExplanation: The noise (option A) dominates; there is no blur (B) and no "
            "blocking (C).",
            "A",
            "distortion",
        ),
        (
            "**Answer:** C\n\n**Reasoning:**\n- Option B would understate the artifacts.\n- "
            "Option D would overstate them.",
            "C",
        ),
        ("D\n\n**Why:** heavy noise. Not E, since the subject is still clear.", "D"),
    ),
    *_group(
        "markdown",
        "gpt",
        ("### Answer\n**C**", "C"),
        ("**Rating:** B (Good)", "B"),
        ("- **Answer:** D\n- **Reason:** strong blocking artifacts", "D"),
        ("## Assessment\n\nThe image is slightly soft.\n\n**Answer: (B)**", "B"),
        ("| Option | Verdict |\n|---|---|\n| A | no |\n| B | **yes** |", "B"),
        ("> C", "C"),
        ("__B__", "B"),
        ("*Answer*: A", "A"),
        ("```\nB\n```", "B"),
        ("1. Observation: strong grain in the sky.\n2. Answer: **A**", "A", "distortion"),
        ("# D", "D"),
        ("**Answer**\n\nC", "C"),
    ),
    *_group(
        "negation",
        "claude",
        ("Not A.", None),
        ("I wouldn't say D.", None),
        ("Definitely not B.", None),
        ("Rather than C.", None),
        ("Not A, B.", "B"),
        ("It's not E, it's D.", "D"),
        ("Definitely not B — I'd pick C.", "C"),
        ("I'd pick D, not E", "D"),
        ("B rather than C.", "B"),
        ("I wouldn't say A; the noise rules it out.", None),
        ("Not Excellent (A).", None),
        ("The image is not Excellent (A) and not Bad (E).", None),
        ("C, not B.", "C"),
        ("Certainly not option A (Noise).", None, "distortion"),
        ("It's not blur. The answer is A.", "A", "distortion"),
        ("I don't think it's C.", None),
        ("Option B is incorrect; the blur is too strong for that.", None, "severity"),
        ("Anything but A.", None),
        ("Not D — the image is better than that. B.", "B"),
        ("Neither A nor B; C.", "C"),
        ("I would not choose B.", None),
        ("Instead of C, I'd go with D.", "D"),
        ("Not A", None),
        ("not a", None),
        ("It is definitely not C (Compression).", None, "distortion"),
    ),
    *_group(
        "hedge",
        "qwen",
        ("A or B", None),
        ("Hard to say, it could be A or C", None),
        ("Either B or C.", None),
        ("Somewhere between A and B.", None),
        ("B/C", None),
        ("It's between C and D; the noise is moderate.", None),
        ("Could be B or C depending on viewing size.", None),
        ("(B) or (C)", None),
        ("Either Blur or Noise, hard to tell.", None, "distortion"),
        ("I'm torn between B (Good) and C (Fair).", None),
        ("Answer: B or C", None),
        ("It could be A or B, but I'll go with B.", "B"),
        ("C or D", None),
        ("Probably B, maybe C.", None),
        ("Both B and C seem plausible.", None),
        ("B or C.", None),
        ("Either A or B, the image is clean.", None, "yesno"),
    ),
    *_group(
        "option A as a word",
        "claude",
        ("A is correct.", "A"),
        ("A, because the image is pristine.", "A"),
        ("A good image with little noise.", None),
        ("A fits best: the photo is crisp.", "A"),
        ("A is the best choice here.", "A"),
        ("A. The image is sharp and clean.", "A"),
        ("A would be my answer.", "A"),
        ("A sharp, clean photo; I'd rate it A.", "A"),
        ("A noisy image overall, so C.", "C"),
        ("A slight blur is present, making this a B.", "B"),
        ("A seems right.", "A"),
        ("A clear case of compression: C.", "C", "distortion"),
        ("A well-exposed photo.", None),
        ("A is my answer: no artifacts at all.", "A"),
        ("A - the photo is flawless.", "A"),
        ("A bit soft, but fine overall.", None),
    ),
    *_group(
        "no answer",
        "gpt",
        ("I'm sorry, but I can't assess the quality of this image.", None),
        ("Unable to determine", None),
        ("The image is sharp and well exposed.", None),
        ("I cannot determine the answer from the information provided.", None),
        ("There is not enough information to choose an option.", None),
        ("The image appears to be a landscape photo taken at dusk.", None),
        ("I'm unable to view images.", None),
        ("Sorry, I can't help with that.", None),
        ("None of the options fit.", None),
        ("It depends on the viewing distance.", None),
        ("{}", None),
        ("N/A", None),
        ("", None),
        ("F", None),
        ("The options are A. Excellent, B. Good, C. Fair, D. Poor, E. Bad.", None),
        ("I need to see the image at full resolution to answer.", None),
    ),
    *_group(
        "cut off",
        "claude",
        ("C\n\nReasoning: Option B (Slight) would under", "C", "severity"),
        ("B\nExplanation: the image is not Excellent (A) because of", "B"),
        ("The answer is", None),
        ("Looking at the image, I would say the quality is", None),
        ("Based on the distortion analysis and the tool scores, the image", None),
        ("**B. Good**\n\nThe image is well exposed and", "B"),
        ("Answer: D\n\nThe heavy", "D"),
        ("I'd say B or", None),
        ("A", None),
        ("B", None),
        ("Final answer: C (Fair). The image shows moderate", "C"),
        ("D\n\nThe image", "D"),
        ("It's not A, the", None),
        ("Not E. It's", None),
        ("C, because the blur", "C"),
        ("A is correct: the photo is", "A"),
        ("Between B and C, I", None),
        ("The correct answer is (B) Good. The", "B"),
        ("**Answer:** C\n\n**Reasoning:**\n- Option B would", "C"),
        ("E\n\nThe image is severely", "E"),
        ("The image is moderately blurred, so the answer is C", None),
        ("I'd go with D. The noise", "D"),
        ("Rather than C, the", None),
        ("A good image with", None),
        ("It could be B", None),
        cut=True,
    ),
    *_group(
        "lower case",
        "qwen",
        ("b", "B"),
        ("answer: c", "C"),
        ("(c)", "C"),
        ("the answer is (b).", "B"),
        ("i'd say c", "C"),
        ("Answer: (e)", "E"),
        ("c.", "C"),
        ("It's a C.", "C"),
        ("a", "A"),
        ("d) poor", "D"),
    ),
    *_group(
        "other languages",
        "qwen",
        ("答案：B", "B"),
        ("答案是 C", "C"),
        ("Antwort: D", "D"),
        ("Réponse : B", "B"),
        ("La respuesta es C.", "C"),
        ("答案：B（良好）", "B"),
        ("Ответ: B", "B"),
        ("Meine Antwort ist nicht A, sondern B.", "B"),
        ("不是A，是B", "B"),
    ),
    *_group(
        "answer marker",
        "gpt",
        ("Answer: **C** (Fair)", "C"),
        ("The correct choice would be B.", "B"),
        ("B is the answer.", "B"),
        ("My pick: D", "D"),
        ("Quality: Poor (D)", "D"),
        ("**Verdict:** C — Fair", "C"),
        ("Respuesta: (A)", "A"),
        ("答案是B。", "B"),
        ("La réponse est D.", "D"),
        ("Rating: 4/5, which corresponds to B (Good).", "B"),
        ("Answer: D. Reason: the noise is strong, which rules out C.", "D"),
        held_out=True,
    ),
    *_group(
        "prose",
        "claude",
        ("I'd rate this a solid C — not quite B territory.", "C"),
        ("Between Good and Fair, I'd pick Fair: C.", "C"),
        ("I choose (A).", "A"),
        ("D, the image is heavily degraded.", "D"),
        ("It is B.", "B"),
        ("Definitely A!", "A"),
        ("A!", "A"),
        ("After weighing the evidence: B.", "B"),
        ("I would say the answer is E, because the image is unrecognisable.", "E"),
        ("The image looks Fair (C) to me.", "C"),
        ("I'm going with C.", "C"),
        ("The image deserves an E.", "E"),
        ("Die Antwort lautet C.", "C"),
        ("There's no visible noise or blur, so A.", "A"),
        (
            "The noise is minimal (not A, since A is noise), and the dominant distortion is "
            "blur, B.",
            "B",
            "distortion",
        ),
        ("None of A, B or C fits well, but C is closest.", "C"),
        ("A and B both look wrong; C.", "C"),
        held_out=True,
    ),
    *_group(
        "committed then reasoning",
        "claude",
        ("**C**\n\nThe image suffers from moderate noise; B would be too optimistic.", "C"),
        ("B\n\nNote: if the noise were stronger, C would apply.", "B"),
        ("C. Fair\n\nWhy not D? The subject is still sharp.", "C"),
        ("B\n\nHowever, A could also be argued.", "B"),
        ("**B** (Good). The main weakness is slight noise; A would require a flawless image.", "B"),
        ("(B) Good — sharp with minor noise.", "B"),
        held_out=True,
    ),
    *_group(
        "negation",
        "claude",
        ("The answer isn't A.", None),
        ("A isn't right; it's B.", "B"),
        ("Can't be E. I'd go for D.", "D"),
        ("A — no. B — yes.", "B"),
        (
            "The photo is not bad, so E is out. It is not excellent either, so not A. I'd say C.",
            "C",
        ),
        ("Given the evidence, A is not appropriate; B is.", "B"),
        held_out=True,
    ),
    *_group(
        "hedge",
        "qwen",
        ("Possibly C, possibly D.", None),
        ("C or maybe D", None),
        ("Either (A) or (B).", None),
        ("I'd say it's either B or C.", None),
        held_out=True,
    ),
    *_group("option text", "qwen", ("Excellent.", "A"), ("good", "B"), held_out=True),
    *_group(
        "no answer",
        "gpt",
        ("Sorry, I can't view the image, so I cannot choose between A, B, C, D, and E.", None),
        held_out=True,
    ),
    *_group(
        "cut off",
        "claude",
        ("Answer: (C) Fair\n\nThe", "C"),
        ("I'd rate it as C because", "C"),
        ("Answer: B or", None),
        ("C\n", "C"),
        ("The answer is D. The", "D"),
        ("It's not A, it's", None),
        cut=True,
        held_out=True,
    ),
    *_group("bare letter", "qwen", ("Option D.", "D"), ("Option B: Good", "B"), held_out=True),
    # Letters mentioned in passing, in a clause the reply concedes or sets aside, or
    # as the label of a side point.  Where a reply labels an option with another option's
    # letter ("The noise (B)" when B is Blur), it contradicts itself and gives no letter.
    *_group(
        "set aside",
        "claude",
        ("The noise (B) is visible but the blur dominates.", None, "distortion"),
        ("Option B (noise) is present but minor; the main issue is the blur.", None, "distortion"),
        ("The noise (A) is visible but the blur dominates.", "B", "distortion"),
        ("Option A (noise) is present but minor; the main issue is the blur.", "B", "distortion"),
        ("B is tempting, but the smearing is more than slight.", None, "severity"),
        ("Although (B) fits the mild grain, the smearing is more than slight.", None, "severity"),
        ("Though option B looks plausible, the blur is heavier than that.", None, "severity"),
        ("Option B is plausible; however, the blur is heavier than slight.", None, "severity"),
        ("Slight (B) was my first thought, yet the edges are clearly smeared.", None, "severity"),
        (
            "While B (Slight) describes the shadows, the faces are far more degraded.",
            None,
            "severity",
        ),
        ("Whereas A (Excellent) would need flawless detail, this photo has visible grain.", None),
        ("The sharpness alone would suggest B, but the noise in the shadows pulls it down.", None),
        (
            "There is a little blur (B), though the JPEG blocking is far more visible.",
            "C",
            "distortion",
        ),
        ("The colours are Excellent (A), but the noise drags the image down.", None),
        ("The exposure would merit an A, but the heavy noise pulls it down.", None),
        (
            "While the noise (A) is noticeable in the shadows, it is the blur that dominates.",
            "B",
            "distortion",
        ),
        (
            "Compression (C) shows in the sky, whereas the blur covers the whole frame.",
            "B",
            "distortion",
        ),
        ("Noise (A) is present but minor. The blur is what stands out.", "B", "distortion"),
        ("B looks plausible, but the smearing is more than slight.", None, "severity"),
        ("It's tempting to say D, yet the subject is still recognisable.", None, "severity"),
    ),
    *_group(
        "set aside",
        "gpt",
        ("**B** is tempting given the clean edges; however, the shadows are noisy.", None),
        ("Option C looked right at first, but the artefacts are heavier than that.", None),
        ("The centre is sharp (A), yet the edges are smeared.", None),
        ("Good (B) detail in the centre, though the corners are soft.", None),
        (
            "- **A (Noise)**: present, but minor\n- **B (Blur)**: strong across the frame",
            "B",
            "distortion",
        ),
    ),
    *_group(
        "set aside",
        "qwen",
        ("(C) compression visible, but blur is main.", "B", "distortion"),
        ("B slight, but blur strong.", None, "severity"),
        ("Noise (A) present but minor.", None, "distortion"),
        ("A tempting, but noise visible.", None),
    ),
    *_group(
        "set aside, then a letter",
        "claude",
        ("B is tempting, but the smearing is more than slight. C.", "C", "severity"),
        ("A is tempting given the grain, but the softness dominates. B.", "B", "distortion"),
        (
            "Though A (Noise) is visible in the shadows, the dominant distortion is blur: B.",
            "B",
            "distortion",
        ),
        (
            "(C) is tempting because of the banding; however, the blur is far stronger. B.",
            "B",
            "distortion",
        ),
        ("Option D is tempting, though the subject is still recognisable. C.", "C", "severity"),
        ("While option C (Moderate) crossed my mind, the smearing is severe. D.", "D", "severity"),
        (
            "Whereas B might fit a thumbnail, at full size the blur is clearly moderate — C.",
            "C",
            "severity",
        ),
        ("The exposure would merit an A, but the heavy noise pulls it down to C.", "C"),
        ("Although B seems close, the noise is heavier. C.", "C"),
        ("B looks plausible, but the smearing is more than slight. C.", "C", "severity"),
        ("Some noise in the sky (A), but the road (C) is the blurriest region.", "C", "region"),
    ),
    *_group(
        "set aside, then a letter",
        "gpt",
        ("C is tempting, but the blocking is faint.\n\n**B**", "B", "distortion"),
        ("B (Slight) is tempting, yet the blur is obvious at full size.\n\nC", "C", "severity"),
        ("**A** is tempting (clean colours), but the grain is visible.\n\n**Answer: B**", "B"),
    ),
    *_group(
        "set aside, then a letter",
        "qwen",
        ("B tempting, but blur heavy. D", "D", "severity"),
        ("Noise (A) minor, but blur strong. B", "B", "distortion"),
    ),
    *_group(
        "committed with a caveat",
        "claude",
        ("I'd go with B, but A is close.", "B"),
        ("C. B is tempting, but the blocking is too strong.", "C"),
        ("The answer is D; while C (Fair) is possible, the noise is too heavy.", "D"),
        ("Although the image is sharp, it is noisy (option A).", "A", "distortion"),
        ("Though the grain is visible, (B) blur is the main distortion.", "B", "distortion"),
        ("While A (Noise) is faint, B fits best: the edges are smeared.", "B", "distortion"),
    ),
    *_group(
        "committed with a caveat",
        "gpt",
        ("Answer: C, though D was close.", "C"),
        ("**Answer: C**\n\nB is tempting, but the grain is too visible.", "C"),
    ),
    *_group("committed with a caveat", "qwen", ("B, although the noise is noticeable.", "B")),
    *_group(
        "passing mention",
        "qwen",
        ("Mostly blur, with some (C) blocking artefacts", "B", "distortion"),
        ("Mostly compression, with a little (B) softness at the edges.", "C", "distortion"),
        ("Heavy blur throughout, plus some noise (A) in the shadows.", "B", "distortion"),
        ("Mostly blocking, with grain in the shadows (A).", "C", "distortion"),
    ),
    *_group(
        "passing mention",
        "claude",
        (
            "Blocking artefacts dominate; there is also slight grain (A) in the sky.",
            "C",
            "distortion",
        ),
        (
            "Mainly smearing from camera shake; a few noisy pixels (A) in the corners.",
            "B",
            "distortion",
        ),
        ("The blur is strong; the noise (A) is a minor point.", "B", "distortion"),
        ("The main problem is blur; compression (C) is barely noticeable.", "B", "distortion"),
        ("With some grain in the sky (A), the car (B) is still the most blurred.", "B", "region"),
        ("The noise (B) is visible.", None, "distortion"),
    ),
    *_group(
        "passing mention",
        "gpt",
        ("Along with mild grain (A), there is strong blocking in the sky.", "C", "distortion"),
        ("Strong blocking in the sky, as well as some (B) softness.", "C", "distortion"),
        ("**Main issue:** blur. Minor: noise (A).", "B", "distortion"),
    ),
]

__all__ = ["CORPUS", "OPTIONS", "Graded"]
