import pytest

from agentic_iqa.query import categories_in, options_in, parse_query
from iqa_tools import load_catalog

TOOLS = [spec.name for spec in load_catalog()]


@pytest.mark.parametrize("text, expected", [
    ("Is the car in this photo blurry?", ["Blurs"]),
    ("Is the sky noisy or grainy?", ["Noise"]),
    ("Are there JPEG artifacts?", ["Compression"]),
    ("Is it overexposed and washed out?", ["Brightness change", "Contrast"]),
    ("How is the white balance?", ["Color distortions"]),
    ("Rate this image.", []),
])
def test_distortion_words_map_to_the_seven_categories(text, expected):
    assert categories_in(text) == expected


def test_objects_tools_options_and_intent():
    parsed = parse_query("How noisy is the sky compared to the person's face?", TOOLS)
    assert parsed.objects == ("sky", "person's face")
    assert parse_query("Is this photo sharp?", TOOLS).objects == ()
    assert parse_query("Check it with MS-SSIM please", TOOLS).tool == "MS-SSIM"
    assert parse_query("Check it with ssim please", TOOLS).tool == "SSIM"
    assert parse_query("Is this photo aesthetically pleasing?").aesthetic
    assert parse_query("Rate the quality of this image.").wants_rating
    mcq = parse_query("Which is worst? A. Blur B. Noise C. JPEG compression")
    assert mcq.is_multiple_choice and mcq.options["C"] == "JPEG compression"


def test_option_lists_must_start_at_a_without_gaps():
    assert options_in("A. yes\nB. no") == {"A": "yes", "B": "no"}
    assert options_in("Grade B. Very nice") == {}
    assert options_in("A. one C. three") == {}
