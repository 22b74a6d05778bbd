"""The catalogue's aliases and family names.  A tool is looked up by any name people
write for it ("Multi-Scale SSIM", "peak signal-to-noise ratio", its display name), each alias
names exactly one tool, and a family name ("TOPIQ", "WaDIQaM") names none for certain."""

from __future__ import annotations

import json

import pytest

from iqa_tools import MetadataError, UnknownToolError, load_catalog
from iqa_tools.catalog import default_metadata_text


@pytest.mark.parametrize(
    ("spelling", "tool"),
    [
        ("Multi-Scale SSIM", "MS-SSIM"),
        ("multiscale ssim", "MS-SSIM"),
        ("Multi-scale structural similarity index", "MS-SSIM"),
        ("structural similarity index", "SSIM"),
        ("Structural Similarity", "SSIM"),
        ("peak signal-to-noise ratio", "PSNR"),
        ("Peak Signal to Noise Ratio", "PSNR"),
        ("visual information fidelity", "VIF"),
        ("feature similarity", "FSIM"),
        ("natural image quality evaluator", "NIQE"),
        ("gradient magnitude similarity deviation", "GMSD"),
        ("TOPIQ (full-reference)", "TOPIQ_FR"),
        ("topiq full reference", "TOPIQ_FR"),
        ("WaDIQaM (no-reference)", "WaDIQaM_NR"),
        ("blind WaDIQaM", "WaDIQaM_NR"),
        ("Q-Align", "QAlign"),
        ("CLIP-IQA", "CLIPIQA"),
        ("clip iqa", "CLIPIQA"),
    ],
)
def test_an_alias_or_display_name_resolves_to_its_tool(spelling, tool):
    assert load_catalog().resolve(spelling) == tool


def test_every_shipped_alias_names_its_own_tool_and_no_other():
    catalog = load_catalog()
    aliases = [(alias, spec.name) for spec in catalog for alias in spec.aliases]
    assert len(aliases) >= 30
    assert all(catalog.resolve(alias) == name for alias, name in aliases)
    # The short names still win over any alias: SSIM is SSIM, MS-SSIM is MS-SSIM.
    assert catalog.resolve("SSIM") == "SSIM" and catalog.resolve("MS SSIM") == "MS-SSIM"


def test_a_family_name_is_no_tool_but_lists_its_members():
    catalog = load_catalog()
    assert catalog.families == {"topiq": ("TOPIQ_FR",), "wadiqam": ("WaDIQaM_FR", "WaDIQaM_NR")}
    for family in ("TOPIQ", "WaDIQaM", "wadiqam"):
        assert family not in catalog
        with pytest.raises(UnknownToolError):
            catalog.resolve(family)


def _write(tmp_path, mutate):
    document = json.loads(default_metadata_text())
    mutate(document["tools"])
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda t: t["SSIM"].update(aliases=["MS SSIM"]),
            r"alias 'MS SSIM' of 'SSIM' is already a spelling of 'MS-SSIM'",
        ),
        (
            lambda t: t["NIQE"].update(aliases=["natural image quality evaluator", "brisque"]),
            r"alias 'brisque' of 'NIQE' is already a spelling of 'BRISQUE'",
        ),
        (
            lambda t: t["PSNR"].update(family="SSIM"),
            r"family 'SSIM' of 'PSNR' is also a spelling of 'SSIM'",
        ),
        (
            lambda t: t["VIF"].update(aliases=["--"]),
            r"entry 'VIF' is invalid: .*no letter or digit",
        ),
        (
            lambda t: t["VIF"].update(aliases="visual information fidelity"),
            r"entry 'VIF' is invalid: aliases",
        ),
    ],
)
def test_an_alias_that_names_two_tools_or_nothing_is_refused(tmp_path, mutate, message):
    with pytest.raises(MetadataError, match=message):
        load_catalog(_write(tmp_path, mutate))


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [("BRISQE", ["BRISQUE"]), ("niqee", ["NIQE"]), ("lpip", ["LPIPS"]), ("Qalighn", ["QAlign"])],
)
def test_a_near_miss_names_the_closest_tool_first(typed, suggested):
    catalog = load_catalog()
    assert catalog.suggest(typed) == suggested
    with pytest.raises(UnknownToolError) as caught:
        catalog.get(typed)
    message = str(caught.value)
    assert message.startswith(f"unknown tool {typed!r}; did you mean {suggested[0]}? Known tools: ")


def test_a_name_near_nothing_gets_no_suggestion():
    catalog = load_catalog()
    assert catalog.suggest("xyzzy") == []
    with pytest.raises(UnknownToolError, match=r"^unknown tool 'xyzzy'; known tools: "):
        catalog.get("xyzzy")


def test_submit_with_a_misspelt_tool_suggests_it_before_the_list(tmp_path):
    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    manifest = tmp_path / "m.csv"
    manifest.write_text("image\na.png\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", "submit", str(manifest), "--tools", "PIQE,BRISQE"])
    assert result.exit_code == 2
    assert "unknown tool 'BRISQE' (did you mean BRISQUE?). Known tools: " in result.output
