import pytest

from agentic_iqa.query import categories_in, objects_in, options_in, parse_query, region_of
from iqa_tools import load_catalog

TOOLS = [spec.name for spec in load_catalog()]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Is the car in this photo blurry?", ["Blurs"]),
        ("Is the sky noisy or grainy?", ["Noise"]),
        ("Are there JPEG artifacts?", ["Compression"]),
        ("Is it overexposed and washed out?", ["Brightness change", "Contrast"]),
        ("How is the white balance?", ["Color distortions"]),
        ("Is there over-exposure in the sky?", ["Brightness change"]),
        ("Are the highlights blown out?", ["Brightness change"]),
        ("Is the flower in focus?", ["Blurs"]),
        ("Rate this image.", []),
    ],
)
def test_distortion_words_map_to_the_seven_categories(text, expected):
    assert categories_in(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Are the colours of this image washed out or distorted? A. Yes B. No",
            ["Color distortions"],
        ),
        ("The colours look faded.", ["Color distortions"]),
        ("Is the image washed out? Are the colours natural?", ["Contrast", "Color distortions"]),
        ("Is the photo hazy and are the colours washed out?", ["Contrast", "Color distortions"]),
        ("Does it look flat and faded?", ["Contrast"]),
        ("Does this image have low contrast?", ["Contrast"]),
    ],
)
def test_washed_out_colours_are_a_colour_question_not_a_contrast_one(text, expected):
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


@pytest.mark.parametrize(
    "query, expected",
    [
        ("Is the top-left corner blurry?", ("top-left quarter", (0.0, 0.0, 0.5, 0.5))),
        ("Is the upper right quadrant too dark?", ("top-right quarter", (0.5, 0.0, 1.0, 0.5))),
        ("Is the lower-left part noisy?", ("bottom-left quarter", (0.0, 0.5, 0.5, 1.0))),
        ("Is the left half of the image noisy?", ("left half", (0.0, 0.0, 0.5, 1.0))),
        ("Is the image noisy on the right side?", ("right half", (0.5, 0.0, 1.0, 1.0))),
        ("Is it noisy on the right?", ("right half", (0.5, 0.0, 1.0, 1.0))),
        ("Is the top of the image dark?", ("top half", (0.0, 0.0, 1.0, 0.5))),
        ("Is the centre of the photo sharp?", ("centre", (0.25, 0.25, 0.75, 0.75))),
        ("Is it blurry in the middle?", ("centre", (0.25, 0.25, 0.75, 0.75))),
    ],
)
def test_named_regions_are_found_from_the_planner_objects(query, expected):
    objects = parse_query(query).objects
    assert len(objects) == 1
    region = region_of(objects[0], query)
    assert region is not None and (region.name, region.box) == expected


@pytest.mark.parametrize(
    "query",
    [
        "Is the car blurry?",
        "Is the top of the car blurry?",
        "Is the exposure right?",
        "Is the person's face noisy?",
    ],
)
def test_objects_and_non_places_name_no_region(query):
    assert all(region_of(name, query) is None for name in parse_query(query).objects)


def test_region_pixels_cover_the_named_part():
    region = region_of("bottom right", "How blurry is the bottom right?")
    assert region.pixels(500, 400) == (250, 200, 500, 400)
    assert region_of("centre", "in the centre").pixels(10, 10) == (2, 2, 8, 8)


@pytest.mark.parametrize(
    "query, objects",
    [
        ("Is the car or the sky sharper?", ["car", "sky"]),
        ("Is the left half noisier than the right half?", ["left half", "right half"]),
        ("Is the face brighter than the background?", ["face", "background"]),
        ("Is the car more blurry than the tree?", ["car", "tree"]),
        ("Which looks worse, the road or the sky?", ["road", "sky"]),
        ("Is the water darker than the sand?", ["water", "sand"]),
    ],
)
def test_a_comparative_ends_an_objects_name(query, objects):
    assert objects_in(query) == objects
