import json

import pytest

from iqa_tools import MetadataError, UnknownToolError, load_catalog
from iqa_tools.catalog import DISTORTION_CATEGORIES, default_metadata_text

PAPER_FR = {
    "TOPIQ_FR",
    "AHIQ",
    "FSIM",
    "LPIPS",
    "DISTS",
    "WaDIQaM_FR",
    "PieAPP",
    "MS-SSIM",
    "GMSD",
    "SSIM",
    "CKDN",
    "VIF",
    "PSNR",
    "VSI",
}
PAPER_NR = {
    "QAlign",
    "CLIPIQA",
    "UNIQUE",
    "HyperIQA",
    "TReS",
    "MUSIQ",
    "WaDIQaM_NR",
    "DBCNN",
    "ARNIQA",
    "NIMA",
    "BRISQUE",
    "NIQE",
    "MANIQA",
    "LIQE",
}


def test_the_papers_toolbox_plus_piqe():
    catalog = load_catalog()
    paper = {spec.name for spec in catalog if spec.from_paper}
    assert {s.name for s in (t for t in catalog if t.type == "FR") if s.from_paper} == PAPER_FR
    assert {s.name for s in (t for t in catalog if t.type == "NR") if s.from_paper} == PAPER_NR
    assert paper == PAPER_FR | PAPER_NR
    piqe = catalog.get("PIQE")
    assert not piqe.from_paper and piqe.weight_free and piqe.type == "NR"


def test_every_pyiqa_name_exists_in_pyiqa_with_the_same_mode_and_direction():
    from pyiqa.default_model_configs import DEFAULT_CONFIGS

    for spec in load_catalog():
        config = DEFAULT_CONFIGS[spec.pyiqa_name]
        assert config["metric_mode"] == spec.type, spec.name
        assert config.get("lower_better", False) == spec.lower_is_better, spec.name


def test_table5_parameters_and_fallback_mappings():
    catalog = load_catalog()
    assert catalog.get("SSIM").normalization.params["beta2"] == 64.9155
    assert catalog.get("TReS").normalization.params["beta2"] == 6559.4161
    for name in ("PSNR", "MS-SSIM", "PieAPP", "VSI"):
        assert catalog.get(name).normalization.source.startswith("ours"), name
    assert catalog.get("PSNR").normalization.form == "logistic5"


def test_lookup_is_forgiving_about_case_dashes_and_pyiqa_names():
    catalog = load_catalog()
    assert catalog.resolve("ms_ssim") == "MS-SSIM"
    assert catalog.resolve("msssim") == "MS-SSIM"
    assert catalog.resolve("topiq-fr") == "TOPIQ_FR"
    assert catalog.resolve("qalign") == "QAlign"
    with pytest.raises(UnknownToolError):
        catalog.get("SSIMM")


def test_hand_crafted_nss_metrics_run_in_float64_and_networks_in_float32():
    catalog = load_catalog()
    assert {s.name for s in catalog if s.precision == "float64"} == {"BRISQUE", "NIQE", "PIQE"}
    # Their cache key also says how the local normalisation is computed (iqa_tools.numerics).
    assert catalog.get("NIQE").numerics == "float64+sepnorm1"
    assert catalog.get("TOPIQ_FR").numerics == "float32"


def test_strengths_use_the_seven_categories():
    for spec in load_catalog():
        assert set(spec.strengths) <= set(DISTORTION_CATEGORIES)
    assert set(load_catalog().get("TOPIQ_FR").strengths) == set(DISTORTION_CATEGORIES)


def write_metadata(tmp_path, mutate):
    document = json.loads(default_metadata_text())
    mutate(document["tools"])
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda t: t["SSIM"]["normalization"]["params"].pop("beta5"),
            r"entry 'SSIM' is invalid: normalization: .*missing \['beta5'\]",
        ),
        (lambda t: t["NIQE"].update(type="XR"), r"entry 'NIQE' is invalid: type"),
        (lambda t: t["VIF"].update(strengths=["Wobble"]), r"entry 'VIF' is invalid: strengths"),
        (lambda t: t["PSNR"].update(score_range=[5, 1]), r"entry 'PSNR' is invalid: .*increasing"),
        (lambda t: t["GMSD"].update(colour="blue"), r"entry 'GMSD' is invalid: colour"),
        (lambda t: t["LPIPS"].pop("pyiqa_name"), r"entry 'LPIPS' is invalid: .*exactly one"),
        (
            lambda t: t["BRISQUE"].update(precision="float16"),
            r"entry 'BRISQUE' is invalid: precision",
        ),
        (
            lambda t: t["NIQE"]["weights"][0].update(sha256="2c4cc61d"),
            r"entry 'NIQE' is invalid: weights\.0\.sha256",
        ),
    ],
)
def test_a_bad_entry_is_named_in_the_error(tmp_path, mutate, message):
    with pytest.raises(MetadataError, match=message):
        load_catalog(write_metadata(tmp_path, mutate))


def test_not_json_and_wrong_shape(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MetadataError, match="not valid JSON"):
        load_catalog(bad)
    bad.write_text("[]")
    with pytest.raises(MetadataError, match="'tools' object"):
        load_catalog(bad)


def test_override_replaces_normalization_of_one_tool(tmp_path):
    override = tmp_path / "calibrated.json"
    override.write_text(
        json.dumps(
            {
                "tools": {
                    "NIQE": {
                        "normalization": {
                            "form": "linear",
                            "params": {"x_at_1": 20.0, "x_at_5": 2.0},
                            "source": "fitted on my data",
                        }
                    }
                }
            }
        )
    )
    catalog = load_catalog(overrides=[override])
    niqe = catalog.get("NIQE")
    assert niqe.normalization.source == "fitted on my data"
    assert niqe.normalize(11.0) == pytest.approx(3.0)
    assert niqe.weights  # the rest of the entry is kept
    assert catalog.get("SSIM").normalization.form == "logistic5"
