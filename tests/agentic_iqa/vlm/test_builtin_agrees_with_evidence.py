"""The offline agent agrees with its own evidence: the option it picks for "which distortion is
most severe?" is the one its analysis rates most severe, and its opinion of a photo falls as
each degradation grows (noise, blur, JPEG), on every photo of the test data."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from agentic_iqa.agents.team import Agents
from agentic_iqa.pipeline import run_inprocess
from agentic_iqa.vlm.builtin import BuiltinClient, answer, damage
from agentic_iqa.vlm.builtin.severity import SEVERITIES
from iqa_tools import ToolRegistry, ToolSettings
from tests.agentic_iqa.conftest import EXAMPLE
from tests.conftest import _data_dir

#: Each degradation at growing levels: additive Gaussian noise σ (8-bit units), Gaussian blur
#: σ (pixels), JPEG quality (falling).
LEVELS: dict[str, tuple[float, ...]] = {
    "noise": (5, 10, 20, 40),
    "blur": (0.5, 1, 2, 3, 5),
    "jpeg": (90, 50, 30, 10, 3),
}
#: The photo folders of the test data (the parameter files beside them are not photos).
PHOTO_FOLDERS = (
    "livec-dev/images",
    "livec-extra/images",
    "tid2013-calibration/ref",
    "tid2013-calibration/dist",
)
SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp"}


def degraded(source: Path, kind: str, level: float, folder: Path) -> Path:
    """``source`` degraded by ``kind`` at ``level``, saved once under ``folder`` (blur and
    noise losslessly, JPEG at that quality)."""
    name = f"{source.parent.parent.name}-{source.parent.name}-{source.stem}-{kind}{level:g}"
    path = folder / (name + (".jpg" if kind == "jpeg" else ".png"))
    if path.exists():
        return path
    image = Image.open(source).convert("RGB")
    if kind == "jpeg":
        image.save(path, quality=int(level))
        return path
    pixels = np.asarray(image, dtype=np.float64)
    if kind == "blur":
        pixels = np.stack(
            [ndimage.gaussian_filter(pixels[..., c], level) for c in range(3)], axis=-1
        )
    elif kind == "noise":
        seed = int.from_bytes(name.encode()[-8:], "little")
        pixels = pixels + np.random.default_rng(seed).normal(0.0, level, pixels.shape)
    else:
        raise ValueError(f"no degradation {kind!r}")
    Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8)).save(path)
    return path


def own_opinion(path: Path) -> float:
    """The builtin's own opinion of the image at ``path``, no tool score in the evidence."""
    return answer.quality_estimate({"image_path": str(path), "quality_scores": {}})


def rises(source: Path, kind: str, folder: Path) -> list[str]:
    """Where the opinion of ``source`` does not fall from one level of ``kind`` to the next."""
    values = [own_opinion(degraded(source, kind, level, folder)) for level in LEVELS[kind]]
    return [
        f"{source.name} {kind} {a:g}->{b:g}: {x:.3f} -> {y:.3f}"
        for a, b, x, y in zip(LEVELS[kind], LEVELS[kind][1:], values, values[1:], strict=False)
        if not y < x
    ]


def every_photo(data_dir: Path) -> list[Path]:
    photos = [
        path
        for folder in PHOTO_FOLDERS
        if (data_dir / folder).is_dir()
        for path in sorted((data_dir / folder).iterdir())
        if path.suffix.lower() in SUFFIXES
    ]
    return photos


# -- the score falls as the damage grows ------------------------------------------------------


def test_the_ceiling_falls_through_every_level_and_stays_on_the_scale():
    values = [damage.ceiling(s) for s in np.linspace(0.0, 5.0, 501)]
    assert all(b < a for a, b in zip(values, values[1:], strict=False))
    assert values[0] == 5.0 and values[-1] == pytest.approx(1.0)
    # a level per severity word: slight at most Good, moderate Fair, severe Poor, extreme Bad
    assert damage.ceiling(1.0) == 4.0 and damage.ceiling(2.0) == 3.0
    assert damage.ceiling(3.0) == 2.0 and damage.ceiling(4.0) == 1.5
    assert damage.bounded(3.2, {"Blurs": 0.5, "Compression": 2.5}) == 2.5
    assert damage.bounded(2.1, {"Noise": 1.0}) == 2.1  # below the ceiling: the opinion stays
    assert damage.bounded(2.1, {"Color distortions": 4.0}) == 2.1  # not damage it counts
    with pytest.raises(ValueError, match="at least 0"):
        damage.ceiling(-0.5)


def opinions(source: Path, kind: str, levels: tuple[float, ...], folder: Path) -> list[float]:
    return [own_opinion(degraded(source, kind, level, folder)) for level in levels]


def test_the_opinion_of_the_example_photo_falls_at_every_level_of_each_degradation(tmp_path):
    assert rises(EXAMPLE, "noise", tmp_path) == []
    assert rises(EXAMPLE, "blur", tmp_path) == []
    assert rises(EXAMPLE, "jpeg", tmp_path) == []
    q3 = own_opinion(degraded(EXAMPLE, "jpeg", 3, tmp_path))
    assert q3 < 1.5, q3  # quality 3, blocks everywhere: Bad


#: Where the opinion may still rise, and why: TID2013's distorted I19 is JPEG-compressed
#: already (its compression reads "severe"), and a light blur (σ 0.5 -> 1) smooths its 8x8
#: blocks away, as a deblocking filter does, which reads as less damage (docs/backends.md).
DEBLOCKED_BY_BLUR = {("blur", "tid2013-calibration/dist/I19.png")}


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize(
    "photo",
    every_photo(_data_dir()),
    ids=lambda path: f"{path.parent.parent.name}/{path.parent.name}/{path.name}",
)
def test_on_every_photo_the_opinion_falls_at_every_level_of_each_degradation(photo, tmp_path):
    """Noise σ 5, 10, 20, 40; blur σ 0.5, 1, 2, 3, 5; JPEG quality 90, 50, 30, 10, 3: on every
    photo of the test data the builtin's opinion falls from each level to the next (fitted on
    the livec-dev photos' copies, ``studies/monotone_opinion.py``; the others never were), and
    JPEG quality 3 (blocks everywhere) is Poor or Bad."""
    name = f"{photo.parent.parent.name}/{photo.parent.name}/{photo.name}"
    for kind in LEVELS:
        found = rises(photo, kind, tmp_path)
        if (kind, name) in DEBLOCKED_BY_BLUR:
            assert found, f"{name} no longer rises under {kind}: drop it from DEBLOCKED_BY_BLUR"
            continue
        assert found == [], found
    q3 = own_opinion(degraded(photo, "jpeg", 3, tmp_path))
    assert q3 <= 2.5, q3


@pytest.mark.data
def test_the_fused_score_of_a_heavily_compressed_photo_is_poor_or_bad(weights_dir, tmp_path):
    """Through the whole pipeline, with BRISQUE's score fused in: JPEG quality 3 (blocks
    everywhere) is Poor or Bad, and each harder compression rates lower."""
    client = BuiltinClient()
    registry = ToolRegistry(
        ToolSettings(device="cpu", tool_cache="memory", weights_dir=str(weights_dir))
    )
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    results = {}
    for quality in (30, 10, 3):
        path = degraded(EXAMPLE, "jpeg", quality, tmp_path)
        state = run_inprocess("Rate the quality of this image.", str(path), agents=agents)
        results[quality] = state["summarizer_result"]
    assert results[3].final_answer in {"Poor", "Bad"}, results[3].quality_score
    assert results[30].quality_score > results[10].quality_score > results[3].quality_score


# -- the option picked is the one the analysis rates most severe ------------------------------

QUESTIONS = (
    "Which distortion is the most severe? A. noise B. blur C. JPEG",
    "Which distortion is the most severe? A. JPEG B. noise C. blur",
    "Which distortion is the most severe? A. blur B. JPEG C. noise",
    "Which distortion is most severe in this image? A. Gaussian noise B. blurriness "
    "C. compression artifacts",
    "Which distortion dominates? A. compression artifacts B. Gaussian noise C. blurriness",
)
OPTION_CATEGORY = {
    "noise": "Noise",
    "Gaussian noise": "Noise",
    "blur": "Blurs",
    "blurriness": "Blurs",
    "JPEG": "Compression",
    "compression artifacts": "Compression",
}
#: Photos with one dominant degradation, and blur σ 3 saved at JPEG quality 30 (the issue's).
DEGRADED = {
    "blur3": (("blur", 3),),
    "noise20": (("noise", 20),),
    "jpeg10": (("jpeg", 10),),
    "blur3+jpeg30": (("blur", 3), ("jpeg", 30)),
}


def options_of(question: str) -> dict[str, str]:
    parts = question.split(" A. ")[1]
    a, rest = parts.split(" B. ")
    b, c = rest.split(" C. ")
    return {"A": a, "B": b, "C": c}


def rated(analysis: Mapping[str, list]) -> dict[str, int]:
    """The severity level the analysis gives each category (its worst over the scopes)."""
    levels: dict[str, int] = {}
    for items in analysis.values():
        for item in items:
            level = SEVERITIES.index(item.severity)
            levels[item.type] = max(levels.get(item.type, 0), level)
    return levels


@pytest.fixture(scope="module")
def degraded_examples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("which")
    paths: dict[str, Path] = {}
    for name, steps in DEGRADED.items():
        path = EXAMPLE
        for kind, level in steps:
            path = degraded(path, kind, level, folder)
        paths[name] = path
    return paths


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("name", sorted(DEGRADED))
def test_the_option_picked_is_the_one_the_analysis_rates_most_severe(
    builtin_agents, degraded_examples, name, question
):
    state = run_inprocess(question, str(degraded_examples[name]), agents=builtin_agents)
    letter = state["summarizer_result"].final_answer
    options = options_of(question)
    assert letter in options, state["summarizer_result"].quality_reasoning
    levels = rated(state["executor_evidence"].distortion_analysis)
    asked = {OPTION_CATEGORY[text] for text in options.values()}
    assert asked <= set(levels), levels  # every option's category was analysed
    picked = OPTION_CATEGORY[options[letter]]
    top = max(levels[c] for c in asked)
    assert levels[picked] == top, (letter, levels)
    # Equal words: the measured severity decides, as the reasoning says.
    tied = [c for c in asked if levels[c] == top]
    measured = answer.category_severity(
        {
            "image_path": str(degraded_examples[name]),
            "query": question,
            "distortion_analysis": {
                key: [item.model_dump() for item in items]
                for key, items in state["executor_evidence"].distortion_analysis.items()
            },
        }
    )
    assert picked == max(tied, key=measured.__getitem__)
    assert SEVERITIES[top] in state["summarizer_result"].quality_reasoning


@pytest.mark.parametrize(
    ("name", "category"), [("blur3", "Blurs"), ("noise20", "Noise"), ("jpeg10", "Compression")]
)
def test_one_dominant_degradation_is_the_answer_whatever_the_order_and_spelling(
    builtin_agents, degraded_examples, name, category
):
    for question in QUESTIONS:
        state = run_inprocess(question, str(degraded_examples[name]), agents=builtin_agents)
        letter = state["summarizer_result"].final_answer
        assert OPTION_CATEGORY[options_of(question)[letter]] == category, (question, letter)
