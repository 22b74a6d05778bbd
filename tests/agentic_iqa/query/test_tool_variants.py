"""A tool the catalogue lacks is never another tool: a catalogue name inside a longer name
(a prefix, a suffix, a version, a plus: "IL-NIQE", "LPIPS-VGG+", "NIQE v2") names a tool the
catalogue lacks, while respellings of a catalogue name (case, hyphens, spaces, aliases) and
ordinary words beside it ("NIQE-based") still name the catalogue's tool."""

from __future__ import annotations

import pytest

from agentic_iqa.query import (
    catalogue_tool,
    excluded_tools_in,
    required_tool_in,
    tool_in,
    uncatalogued_tools_in,
)
from iqa_tools import load_catalog

CATALOG = load_catalog()
TOOLS = [spec.name for spec in CATALOG]
FULL_REFERENCE = {spec.name for spec in CATALOG if spec.type == "FR"}


def required(query: str, reference: bool = False) -> str | None:
    return required_tool_in(query, TOOLS, reference=reference)


@pytest.mark.parametrize(
    "query, uncatalogued",
    [
        # a prefix, glued or an acronym a space apart
        ("Score this image with IL-NIQE.", "IL-NIQE"),
        ("score this image with il-niqe", "il-niqe"),
        ("Use il_niqe on it.", "il_niqe"),
        ("Use IL NIQE.", "IL NIQE"),
        ("use il niqe please", "il niqe"),
        ("SCORE THIS IMAGE WITH IL-NIQE.", "IL-NIQE"),
        ("Compare it to the reference with CW-SSIM.", "CW-SSIM"),
        ("Use IW SSIM against the reference.", "IW SSIM"),
        ("Is it good by 3-SSIM?", "3-SSIM"),
        # a suffix: a backbone, a training set, a letter, an acronym
        ("Measure it with LPIPS-VGG.", "LPIPS-VGG"),
        ("Measure it with lpips-vgg.", "lpips-vgg"),
        ("Measure it with LPIPS VGG.", "LPIPS VGG"),
        ("Rate it with MUSIQ-AVA.", "MUSIQ-AVA"),
        ("Rate it with MUSIQ (AVA).", "MUSIQ (AVA)"),
        ("Rate it with musiq-spaq", "musiq-spaq"),
        ("Score with NIQE-M.", "NIQE-M"),
        ("Score with NIQE-matlab.", "NIQE-matlab"),
        ("Use NIMA-vgg16 for this.", "NIMA-vgg16"),
        ("Use LIQE-mix.", "LIQE-mix"),
        ("Use CLIPIQA-lite.", "CLIPIQA-lite"),
        ("Use MANIQA-kadid.", "MANIQA-kadid"),
        ("What does PSNR-HVS say?", "PSNR-HVS"),
        ("What does PSNR-Y say?", "PSNR-Y"),
        # a plus, alone or after a suffix
        ("Score it with CLIP-IQA+.", "CLIP-IQA+"),
        ("Score it with clipiqa+", "clipiqa+"),
        ("Score it with DBCNN++ please", "DBCNN++"),
        ("Measure it with LPIPS-VGG+.", "LPIPS-VGG+"),
        ("Measure it with LPIPS+.", "LPIPS+"),
        # a version
        ("Score with NIQE v2.", "NIQE v2"),
        ("Measure with LPIPS v0.0", "LPIPS v0.0"),
        ("Score with NIQE version 2.", "NIQE version 2"),
        ("Score with NIQE-v2.", "NIQE-v2"),
        # a family name whose variant the catalogue lacks
        ("Score it with TOPIQ NR.", "TOPIQ (no-reference)"),
        ("Score it with TOPIQ-NR.", "TOPIQ (no-reference)"),
        # other orders
        ("IL-NIQE: how good is this image?", "IL-NIQE"),
        ("With NIQE v2, how good is this image?", "NIQE v2"),
        ("How good is this image according to CLIP-IQA+?", "CLIP-IQA+"),
    ],
)
def test_a_catalogue_name_inside_a_longer_name_is_a_tool_the_catalogue_lacks(query, uncatalogued):
    reference = any(name in uncatalogued.upper() for name in ("SSIM", "LPIPS", "PSNR"))
    assert required(query, reference=reference) is None
    assert tool_in(query, TOOLS) is None
    assert uncatalogued_tools_in(query, TOOLS) == [uncatalogued]
    assert excluded_tools_in(query, TOOLS) == []


@pytest.mark.parametrize(
    "query, tool",
    [
        # case, hyphens, spaces, underscores
        ("Score this image with NIQE.", "NIQE"),
        ("score this image with niqe", "NIQE"),
        ("Score this image with Niqe.", "NIQE"),
        ("Use MS SSIM.", "MS-SSIM"),
        ("Use ms_ssim.", "MS-SSIM"),
        ("Use Multi-Scale SSIM.", "MS-SSIM"),
        ("Use Q Align.", "QAlign"),
        ("Use q-align.", "QAlign"),
        ("Use QAlign.", "QAlign"),
        ("Use CLIP IQA.", "CLIPIQA"),
        ("Use DB-CNN.", "DBCNN"),
        ("Use Hyper-IQA.", "HyperIQA"),
        # the variants the catalogue's tools are, listed as its aliases
        ("Use LPIPS-Alex.", "LPIPS"),
        ("Use LPIPS v0.1.", "LPIPS"),
        ("Use MUSIQ-KonIQ.", "MUSIQ"),
        ("Use MUSIQ-KonIQ-10k.", "MUSIQ"),
        ("Use HyperIQA-KonIQ.", "HyperIQA"),
        ("Use NIMA-AVA.", "NIMA"),
        # a qualifier or an ordinary word beside the name
        ("Use FR-TOPIQ.", "TOPIQ_FR"),
        ("Use TOPIQ-FR.", "TOPIQ_FR"),
        ("Use WaDIQaM-NR.", "WaDIQaM_NR"),
        ("Use CKDN-FR.", "CKDN"),
        ("Use NIQE-NR.", "NIQE"),
        ("Is the AI NIQE score fine?", "NIQE"),
        ("Use the NR-NIQE score.", "NIQE"),
        ("Give me a NIQE-based score.", "NIQE"),
        ("Use an SSIM-like metric.", "SSIM"),
        ("Use the NIQE metric.", "NIQE"),
        ("Is NIQE 4.2 good?", "NIQE"),  # a number after the name is a score, not a version
        ("Is this an NIQE score?", "NIQE"),  # an English word a space before
        # a named tool before or after one the catalogue lacks
        ("Use NIQE, not IL-NIQE.", "NIQE"),
        ("CLIP-IQA+ is not needed; use CLIP-IQA.", "CLIPIQA"),
    ],
)
def test_respellings_of_a_catalogue_name_still_name_its_tool(query, tool):
    assert required(query, reference=tool in FULL_REFERENCE) == tool
    assert not any(
        name.casefold().replace("-", "") == tool.casefold()
        for name in uncatalogued_tools_in(query, TOOLS)
    )


@pytest.mark.parametrize(
    "query, uncatalogued, excluded",
    [
        ("Score it, but not with IL-NIQE.", [], []),
        ("Don't use CLIP-IQA+.", [], []),
        ("Score it without LPIPS-VGG.", [], []),
        ("Score it with IL-NIQE, not with NIQE.", ["IL-NIQE"], ["NIQE"]),
        ("Not with NIQE; use IL-NIQE.", ["IL-NIQE"], ["NIQE"]),
        ("Use NIQE v2 and not NIQE.", ["NIQE v2"], ["NIQE"]),
    ],
)
def test_negation_rules_out_the_name_it_stands_before(query, uncatalogued, excluded):
    assert required(query) is None
    assert uncatalogued_tools_in(query, TOOLS) == uncatalogued
    assert excluded_tools_in(query, TOOLS) == excluded


def test_dotted_initials_name_no_tool():
    """Dotted initials ("N.I.Q.E.") are not read as a name (a full stop is never inside one)."""
    assert required("Score it with N.I.Q.E.") is None
    assert uncatalogued_tools_in("Score it with N.I.Q.E.", TOOLS) == []


@pytest.mark.parametrize(
    "query",
    [
        "Use NIQE+BRISQUE.",
        "Use NIQE + BRISQUE.",
        "Use NIQE plus BRISQUE.",
        "Use NIQE-or-BRISQUE.",
        "Use NIQE-BRISQUE.",
        "Use NIQE, then BRISQUE.",
    ],
)
def test_two_tools_joined_are_both_named(query):
    assert required(query) == "NIQE"
    assert uncatalogued_tools_in(query, TOOLS) == []


@pytest.mark.parametrize("spec", list(CATALOG), ids=lambda spec: spec.name)
def test_every_catalogue_name_with_a_prefix_suffix_version_or_plus_names_no_tool(spec):
    """For each catalogue tool, its name and display name (not the bracketed ones) name it, and
    each of them with a glued prefix, suffix, letter, version or plus names none."""
    reference = spec.type == "FR"
    for name in {spec.name, spec.display_name} - {n for n in (spec.display_name,) if "(" in n}:
        assert required(f"Score this image with {name}.", reference) == spec.name, name
        for variant in (f"IL-{name}", f"{name}-VGG", f"{name}-M", f"{name} v2", f"{name}+"):
            query = f"Score this image with {variant}."
            assert required(query, reference) is None, variant
            assert uncatalogued_tools_in(query, TOOLS) == [variant]


@pytest.mark.parametrize(
    "value, tool",
    [
        ("NIQE", "NIQE"),
        ("ms_ssim", "MS-SSIM"),
        ("the NIQE metric", "NIQE"),
        ("unique", "UNIQUE"),
        ("Q-Align", "QAlign"),
        ("IL-NIQE", None),
        ("CLIP-IQA+", None),
        ("LPIPS-VGG+", None),
        ("MUSIQ-AVA", None),
        ("NIQE v2", None),
        ("none of them", None),
    ],
)
def test_a_models_field_names_a_catalogue_tool_only_as_itself(value, tool):
    """What a model writes for a tool ("required_tool", a selection) is the catalogue's tool only
    when it is one of its spellings: "CLIP-IQA+" is not CLIP-IQA, though its letters say so."""
    assert catalogue_tool(value, CATALOG) == tool
