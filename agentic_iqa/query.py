"""Reading a user's query without a language model: distortions, objects, tools, options, intent.

Deliberately simple and predictable: word lists mapped to the paper's seven distortion
categories, determiner phrases for named objects ("the car", "the person's face"), the tool
catalogue's names for explicitly requested tools, and lettered options for multiple choice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Words and phrases that name a distortion category (matched as whole words, lower case).
DISTORTION_TERMS: dict[str, tuple[str, ...]] = {
    "Blurs": ("blur", "blurs", "blurry", "blurred", "blurriness", "out of focus", "out-of-focus",
              "defocus", "defocused", "unfocused", "motion blur", "fuzzy", "smeared", "soft focus"),
    "Noise": ("noise", "noisy", "grain", "grainy", "graininess", "speckle", "speckled",
              "noisiness"),
    "Compression": ("compression", "compressed", "jpeg", "jpg", "artifact", "artifacts",
                    "artefact", "artefacts", "blocky", "blockiness", "blocking", "pixelated",
                    "pixelation", "banding", "ringing"),
    "Brightness change": ("brightness", "bright", "too bright", "dark", "darkness", "too dark",
                          "dim", "exposure", "exposed", "overexposed", "overexposure",
                          "underexposed", "underexposure", "lighting", "illumination",
                          "brightness change"),
    "Contrast": ("contrast", "washed out", "washed-out", "hazy", "haze", "faded", "flat"),
    "Color distortions": ("color", "colour", "colors", "colours", "colored", "coloured",
                          "saturation", "saturated", "desaturated", "oversaturated", "tint",
                          "color cast", "colour cast", "white balance", "hue",
                          "color distortion", "color distortions", "colour distortion"),
    "Sharpness": ("sharp", "sharpness", "crisp", "crispness", "clarity", "detail", "details",
                  "oversharpened", "over-sharpened"),
}

#: Words of a question about taste rather than technical quality.
AESTHETIC_TERMS = (
    "aesthetic", "aesthetically", "aesthetics", "beautiful", "beauty", "pleasing", "pretty",
    "attractive", "artistic", "art", "style", "stylish", "mood", "emotion", "emotional", "feel",
    "feeling", "feelings", "happy", "sad", "composition", "lovely", "ugly", "appealing",
    "romantic", "calm", "cozy", "elegant", "gorgeous", "nostalgic", "evoke", "evokes",
)

#: Words asking for a rating, which puts the summarizer in scoring mode.
RATING_TERMS = ("rate", "rating", "score", "grade", "how good", "how is the quality",
                "overall quality", "quality of this", "quality of the", "assess the quality",
                "evaluate the quality", "quality level", "mos")

_NOT_OBJECTS = {
    "image", "images", "photo", "photos", "picture", "pictures", "photograph", "pic", "shot",
    "quality", "overall", "following", "options", "option", "question", "answer", "one", "level",
    "distortion", "distortions", "most", "main", "best", "worst", "type", "kind", "degree",
    "severity", "whole", "entire", "reference", "original", "tool", "score", "rating", "way",
    "visual", "first", "second", "same", "other", "image's", "photo's", "it", "scene's",
}
_STOP = {
    "in", "on", "of", "at", "is", "are", "was", "were", "be", "look", "looks", "appear",
    "appears", "seem", "seems", "and", "or", "with", "to", "for", "from", "by", "that", "this",
    "which", "than", "as", "have", "has", "affected", "suffer", "suffers", "there", "very",
    "too", "so", "how", "what", "a", "an", "the", "using", "use", "according", "compared",
}
_WORD = r"[a-z][a-z'\-]*"
_DETERMINER_PHRASE = re.compile(rf"\b(?:the|this|that|these|those|its)\s+({_WORD}(?:\s+{_WORD})?)")
_OPTION = re.compile(r"(?:^|\s|\()([A-H])[\.\):]\s*(.+?)(?=\s+\(?[A-H][\.\):]\s|\n|$)", re.M)


@dataclass(frozen=True)
class ParsedQuery:
    text: str
    distortions: tuple[str, ...]          # categories named anywhere in the query (ordered)
    objects: tuple[str, ...]              # named objects or regions
    tool: str | None                      # canonical name of an explicitly named tool
    options: dict[str, str] = field(default_factory=dict)  # letter -> option text
    aesthetic: bool = False
    wants_rating: bool = False

    @property
    def is_multiple_choice(self) -> bool:
        return len(self.options) >= 2


def _contains(text: str, term: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text) is not None


def categories_in(text: str) -> list[str]:
    lowered = text.lower()
    found: list[tuple[int, str]] = []
    for category, terms in DISTORTION_TERMS.items():
        positions = [m.start() for t in terms
                     for m in re.finditer(rf"(?<![\w-]){re.escape(t)}(?![\w-])", lowered)]
        if positions:
            found.append((min(positions), category))
    return [category for _, category in sorted(found)]


def _distortion_words() -> set[str]:
    return {word for terms in DISTORTION_TERMS.values() for term in terms for word in term.split()}


def objects_in(text: str) -> list[str]:
    excluded = _NOT_OBJECTS | _distortion_words() | set(AESTHETIC_TERMS)
    objects: list[str] = []
    for match in _DETERMINER_PHRASE.finditer(text.lower()):
        words: list[str] = []
        for word in match.group(1).split():
            if word in _STOP:
                break
            words.append(word)
        words = [w for w in words if w not in excluded]
        if words:
            name = " ".join(words)
            if name not in objects:
                objects.append(name)
    return objects


def tool_in(text: str, tool_names: Iterable[str]) -> str | None:
    """The longest tool name mentioned as a whole word (so "MS-SSIM" wins over "SSIM")."""
    lowered = text.lower()
    for name in sorted(tool_names, key=len, reverse=True):
        variants = {name.lower(), name.lower().replace("_", "-"), name.lower().replace("_", " "),
                    name.lower().replace("-", "").replace("_", "")}
        if any(_contains(lowered, variant) for variant in variants):
            return name
    return None


def options_in(text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for letter, body in _OPTION.findall(text):
        options.setdefault(letter, body.strip().rstrip(".;,"))
    letters = sorted(options)
    # Real option lists start at A and have no gaps; anything else is a false positive.
    if letters != [chr(ord("A") + i) for i in range(len(letters))]:
        return {}
    return options


def parse_query(text: str, tool_names: Iterable[str] = ()) -> ParsedQuery:
    options = options_in(text)
    stem = text
    if options:
        first = re.search(r"(?:^|\s|\()A[\.\):]\s", text)
        stem = text[: first.start()] if first else text
    lowered = text.lower()
    return ParsedQuery(
        text=text,
        distortions=tuple(categories_in(text)),
        objects=tuple(objects_in(stem)),
        tool=tool_in(text, tool_names),
        options=options,
        aesthetic=any(_contains(lowered, t) for t in AESTHETIC_TERMS),
        wants_rating=any(_contains(lowered, t) for t in RATING_TERMS),
    )
