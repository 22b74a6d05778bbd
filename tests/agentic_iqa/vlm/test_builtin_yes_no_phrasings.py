"""The offline agent answers a yes/no question about noise or blur the right way round however
it is phrased: on a photo with severe noise and no blur, "Is the image clear of noise?" is No,
"Is noise absent from the image?" is not "Yes: severe noise" and "Is the image unsharp?" is
not an overall-quality Yes.

Each phrasing is asked of two copies of one real photo made by the test degradation generator:
one with severe shot noise and no blur, one with severe defocus and no noise.  The expected
answer follows from what the phrasing asks (whether noise or blur is there, or is not) and what
each copy has, so the table is the rule, not a list of remembered answers; each is asked as a
free question and with the options "Yes"/"No" in both orders."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from agentic_iqa.fitting import evaluation_degradations as evaluation
from agentic_iqa.pipeline import Agents, run_inprocess
from agentic_iqa.query import with_options
from tests.agentic_iqa.conftest import EXAMPLE

SEVERITY_WORDS = ("slight", "moderate", "severe", "extreme")
#: The distortion each noun of an answer speaks of ("loss of sharpness" is what blur costs).
SPOKEN_OF = {"noise": "noise", "blur": "blur", "loss of sharpness": "blur"}
#: What each copy of the photo has.
HAS = {"noisy": {"noise": True, "blur": False}, "blurred": {"noise": False, "blur": True}}

#: (question, the distortion it asks about, whether Yes means that distortion is there).
PHRASINGS: list[tuple[str, str, bool]] = [
    # presence asked plainly, and respelled
    ("Is the image noisy?", "noise", True),
    ("Is there noise?", "noise", True),
    ("Does the photo have grain?", "noise", True),
    ("Is the picture grainy?", "noise", True),
    ("Is noise visible in the image?", "noise", True),
    ("Is the image noisy or not?", "noise", True),
    ("Answer yes or no: is the image noisy?", "noise", True),
    ("Isn't the image noisy?", "noise", True),  # the opening "n't" negates nothing
    # absence asked
    ("Is the image free of noise?", "noise", False),
    ("IS THE IMAGE FREE OF NOISE?", "noise", False),
    ("Is the image free from grain?", "noise", False),
    ("Is the image clear of noise?", "noise", False),
    ("Is the image noise-free?", "noise", False),
    ("Is the image noise free?", "noise", False),
    ("Is noise absent from the image?", "noise", False),
    ("Is there no noise?", "noise", False),
    ("Is there no visible noise?", "noise", False),
    ("Is the photo without noise?", "noise", False),
    ("Does it lack noise?", "noise", False),
    ("Is the picture devoid of grain?", "noise", False),
    ("Is the noise not visible?", "noise", False),
    ("Is noise not a problem in this photo?", "noise", False),
    ("Does the image show an absence of noise?", "noise", False),
    ("Would you say the photo is free of grain?", "noise", False),
    ("Is the image clean?", "noise", False),
    ("Is the image noiseless?", "noise", False),
    # absence negated: presence again
    ("Is the image not free of noise?", "noise", True),
    ("Is the photo not noise-free?", "noise", True),
    ("Is the image not clean?", "noise", True),
    ("Is the photo not without grain?", "noise", True),
    # blur asked plainly, by un-words and by negated qualities
    ("Is the image blurry?", "blur", True),
    ("Is the image unsharp?", "blur", True),
    ("Is the image unfocused?", "blur", True),
    ("Is the image out of focus?", "blur", True),
    ("Is the image defocused?", "blur", True),
    ("Is the image unclear?", "blur", True),
    ("Is the image not sharp?", "blur", True),
    ("Is the image not in focus?", "blur", True),
    ("Is the photo not crisp?", "blur", True),
    ("Is the image lacking detail?", "blur", True),
    ("Does the photo lack sharpness?", "blur", True),
    ("Is there a loss of detail?", "blur", True),
    ("Is the image not free of blur?", "blur", True),
    # qualities, and blur asked to be absent
    ("Is the image sharp?", "blur", False),
    ("Is the image in focus?", "blur", False),
    ("Is the image crisp?", "blur", False),
    ("Is the image clear?", "blur", False),
    ("Is the image well focused?", "blur", False),
    ("Does the image have enough detail?", "blur", False),
    ("Is the sharpness good?", "blur", False),
    ("Is the image free of blur?", "blur", False),
    ("Is the image clear of blur?", "blur", False),
    ("Is the image blur-free?", "blur", False),
    ("Is blur absent from the image?", "blur", False),
    ("Is the photo without any blur?", "blur", False),
    ("Is the image not blurry?", "blur", False),
    ("Is the photo non-blurry?", "blur", False),
    ("Is the image unblurred?", "blur", False),
    # double negation
    ("Is the image not unsharp?", "blur", False),
    ("Is the image not out of focus?", "blur", False),
]

#: Questions about both: (question, answer for the noisy copy, answer for the blurred copy).
BOTH: list[tuple[str, str, str]] = [
    ("Is the image neither blurry nor noisy?", "No", "No"),
    ("Is the image free of noise and blur?", "No", "No"),
    ("Is the image sharp and free of noise?", "No", "No"),
    ("Is the image noisy or blurry?", "Yes", "Yes"),
    ("Is the image noisy and blurry?", "No", "No"),
    ("Is the image not only noisy but also blurry?", "No", "No"),
    ("Is the image noisy but sharp?", "Yes", "No"),
    ("Is the image blurry and not noisy?", "No", "Yes"),
]


@pytest.fixture(scope="module")
def example_noisy_blurred(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example photo with severe shot noise (``noisy``) and with severe defocus
    (``blurred``), by the evaluation degradations."""
    folder = tmp_path_factory.mktemp("yes-no-phrasings")
    original = Image.open(EXAMPLE).convert("RGB")
    paths = {"noisy": folder / "noisy.png", "blurred": folder / "blurred.png"}
    evaluation.degrade(original, "shot_noise", 3).save(paths["noisy"])
    evaluation.degrade(original, "defocus", 3).save(paths["blurred"])
    return paths


def statements(finding: str) -> list[tuple[str, bool]]:
    """(distortion, said to be visible) for each claim of an answer's finding: "severe noise",
    "no blur is visible", "noise or blur is not visible", joined by ", and "."""
    said = []
    for part in finding.split(", and "):
        unseen = (
            part.startswith("no ")
            and part.endswith(" is visible")
            or part.endswith(" is not visible")
        )
        words = part.removeprefix("no ").removesuffix(" is not visible").removesuffix(" is visible")
        for noun in words.split(" or "):
            first, _, rest = noun.partition(" ")
            noun = rest if first in SEVERITY_WORDS else noun
            assert noun in SPOKEN_OF, f"unexpected finding {part!r}"
            said.append((SPOKEN_OF[noun], not unseen))
    return said


def check_reply(reply: str, photo: str, expected: str, about: str | None) -> None:
    """``reply`` ("Yes: ..."/"No: ...") says ``expected`` first, and every claim after it is
    true of ``photo``, one of them about ``about``: never "Yes: severe noise" to "Is noise
    absent?", never an overall-quality answer to a question that names a distortion."""
    first, colon, finding = reply.partition(": ")
    assert colon and first == expected, reply
    assert "technical quality" not in finding, reply
    said = statements(finding.rstrip("."))
    assert said, reply
    for distortion, visible in said:
        assert visible == HAS[photo][distortion], f"{reply!r} is not true of the {photo} photo"
    if about is not None:
        assert about in {distortion for distortion, _ in said}, reply


def ask(agents: Agents, query: str, image: Path) -> tuple[str, str]:
    result = run_inprocess(query, str(image), agents=agents)["summarizer_result"]
    return result.final_answer, result.quality_reasoning


def test_the_table_asks_both_ways_round_about_both_distortions():
    asked = {(about, there) for _, about, there in PHRASINGS}
    assert asked == {("noise", True), ("noise", False), ("blur", True), ("blur", False)}
    assert len(PHRASINGS) >= 40 and len({q.casefold() for q, _, _ in PHRASINGS}) >= 40


def test_the_two_photos_have_what_the_table_assumes(agents, example_noisy_blurred):
    """The copies are what the truth below says: noise and no blur, blur and no noise."""
    for photo, has in HAS.items():
        for distortion, question in (
            ("noise", "How severe is the noise?"),
            ("blur", "How severe is the blur?"),
        ):
            said, _ = ask(agents, question, example_noisy_blurred[photo])
            assert said.startswith("No ") is not has[distortion], (photo, said)


@pytest.mark.parametrize(
    ("question", "about", "yes_means_there"), PHRASINGS, ids=[row[0] for row in PHRASINGS]
)
def test_a_yes_no_question_is_answered_the_way_it_asks(
    agents, example_noisy_blurred, question, about, yes_means_there
):
    for photo, has in HAS.items():
        expected = "Yes" if has[about] == yes_means_there else "No"
        said, _ = ask(agents, question, example_noisy_blurred[photo])
        check_reply(said, photo, expected, about)
        for options in (["Yes", "No"], ["No", "Yes"]):
            letter, why = ask(agents, with_options(question, options), example_noisy_blurred[photo])
            assert letter == "AB"[options.index(expected)], (photo, options, letter, why)
            check_reply(why.split(". ")[0], photo, expected, about)


@pytest.mark.parametrize(("question", "on_noisy", "on_blurred"), BOTH, ids=[row[0] for row in BOTH])
def test_a_question_about_both_asks_each_its_own_way(
    agents, example_noisy_blurred, question, on_noisy, on_blurred
):
    """Everything asked absent must be; of what is asked present, one ("or") or all ("and")."""
    for photo, expected in (("noisy", on_noisy), ("blurred", on_blurred)):
        said, _ = ask(agents, question, example_noisy_blurred[photo])
        check_reply(said, photo, expected, None)
        letter, _ = ask(agents, with_options(question, ["No", "Yes"]), example_noisy_blurred[photo])
        assert letter == ("B" if expected == "Yes" else "A"), (photo, letter)
