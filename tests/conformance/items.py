"""Items for the conformance suite: small images, Q-Bench-style questions with a right answer,
and rating requests with the simulated model's own level, written as a job manifest.

The images are degraded copies of the example photo (made here, seeded), small so that the real
tools the agent runs on them cost little; the simulated model does not look at pixels, it knows
each item's truth (:class:`~tests.conformance.simulated_model.Truth`).
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from agentic_iqa.fitting.degradations import degrade
from tests.conformance.simulated_model import SimulatedModel, Truth

REPO = Path(__file__).resolve().parents[2]
SIDE = 192
KINDS = (("blur", "Blurs"), ("noise", "Noise"), ("jpeg", "Compression"))


@dataclass(frozen=True)
class Item:
    id: str
    image: Path
    truth: Truth


def images(folder: Path, count: int) -> list[Path]:
    """``count`` distinct small photos: the example pristine and degraded by kind and level
    (:func:`degradation` of a path says which level)."""
    folder.mkdir(parents=True, exist_ok=True)
    original = Image.open(REPO / "examples" / "i03_reference.png").convert("RGB")
    original = original.resize((SIDE, SIDE), Image.Resampling.LANCZOS)
    variants = [("pristine", 0)] + [(kind, level) for level in (1, 2, 3, 4) for kind, _ in KINDS]
    paths = []
    for index in range(count):
        kind, level = variants[index % len(variants)]
        image = original if level == 0 else degrade(original, kind, level)
        turns = index // len(variants)
        if turns:  # more images than variants: each pass turned a quarter further
            image = image.rotate(90 * turns)
        path = folder / f"img{index:03d}-{kind}{level}.png"
        image.save(path)
        paths.append(path)
    return paths


def degradation(path: Path) -> int:
    """The degradation level (0 pristine .. 4) an image of :func:`images` was made with."""
    return int(path.stem[-1])


def _options(texts: list[str], rng: random.Random, shuffle: bool = True) -> dict[str, str]:
    texts = list(texts)
    if shuffle:
        rng.shuffle(texts)
    return {chr(ord("A") + i): text for i, text in enumerate(texts)}


def _query(stem: str, options: dict[str, str]) -> str:
    return stem + " " + " ".join(f"{letter}. {text}" for letter, text in options.items())


def multiple_choice(paths: list[Path], count: int, seed: int) -> list[Item]:
    """``count`` questions of five kinds (yes/no on a named distortion, which distortion, how
    severe, an object in focus, the overall level), each with a right letter."""
    rng = random.Random(seed)
    items = []
    for index in range(count):
        image = paths[index % len(paths)]
        kind = index % 5
        if kind == 0:
            adjective, category = rng.choice(
                [("blurry", "Blurs"), ("noisy", "Noise"), ("too dark", "Brightness change")]
            )
            options = _options(["Yes", "No"], rng)
            truth = Truth(
                _query(f"Is this image {adjective}?", options), named=(category,), options=options
            )
        elif kind == 1:
            options = _options(["Noise", "Blur", "Overexposure", "JPEG compression"], rng)
            truth = Truth(
                _query("Which distortion is most visible in this image?", options),
                named=("Noise", "Blurs", "Brightness change", "Compression"),
                options=options,
            )
        elif kind == 2:
            noun, category = rng.choice([("noise", "Noise"), ("blur", "Blurs")])
            options = _options(["None", "Slight", "Moderate", "Severe"], rng, shuffle=False)
            truth = Truth(
                _query(f"How severe is the {noun} in this image?", options),
                named=(category,),
                options=options,
            )
        elif kind == 3:
            options = _options(["Yes", "No"], rng)
            truth = Truth(
                _query("Is the car in this photo in focus?", options),
                scope=("car",),
                named=("Blurs",),
                options=options,
            )
        else:
            options = _options(["Excellent", "Good", "Fair", "Poor", "Bad"], rng, shuffle=False)
            truth = Truth(
                _query("What is the overall quality of this image?", options), options=options
            )
        letter = rng.choice(sorted(truth.options))
        truth = Truth(
            truth.query,
            truth.scope,
            truth.named,
            truth.options,
            letter,
            severity=rng.choice(["slight", "moderate", "severe"]),
        )
        items.append(Item(f"mcq{index:03d}", image, truth))
    return items


def scoring(paths: list[Path], count: int, seed: int) -> list[Item]:
    """``count`` rating requests.  A right model rates what the image shows: its own level is
    5 for the pristine photo down to 1 for the heaviest degradation, so the tools, which
    measure the same pixels, agree with it up to their own error."""
    rng = random.Random(seed + 1)
    chosen = [paths[index % len(paths)] for index in range(count)]
    rng.shuffle(chosen)
    return [
        Item(
            f"score{index:03d}",
            path,
            Truth("Rate the quality of this image.", level=5 - degradation(path)),
        )
        for index, path in enumerate(chosen)
    ]


def write_manifest(items: list[Item], path: Path) -> Path:
    """A CSV manifest: id, image, query, answer (a letter) or mos (the model's own level)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "image", "query", "answer", "mos"])
        for item in items:
            writer.writerow(
                [
                    item.id,
                    str(item.image),
                    item.truth.query,
                    item.truth.answer or "",
                    item.truth.level if item.truth.level is not None else "",
                ]
            )
    return path


def teach(model: SimulatedModel, items: list[Item]) -> None:
    for item in items:
        model.learn(item.image, item.truth)


__all__ = ["Item", "images", "multiple_choice", "scoring", "teach", "write_manifest"]
