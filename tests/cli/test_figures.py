"""``eval report --figures`` and ``eval compare --figures`` on real metric jobs over a dataset laid
out as KADID-10k ships it: SVG and PDF files, the HTML embedding them, the distortion breakdown."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFilter
from scipy import stats
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.conftest import natural_image

# Left out of the README's test command (CI runs it): whole jobs, then their figures
# drawn.
pytestmark = pytest.mark.slow

runner = CliRunner()
SVG = "{http://www.w3.org/2000/svg}"
#: KADID-10k's type numbers: 01 gaussian_blur, 10 jpeg, 11 white_noise, 25 contrast_change.
TYPES = {1: "gaussian_blur", 10: "jpeg", 11: "white_noise"}


def distort(image: Image.Image, kind: int, level: int, rng: np.random.Generator) -> Image.Image:
    if kind == 1:
        return image.filter(ImageFilter.GaussianBlur(0.7 * level))
    if kind == 11:
        pixels = np.asarray(image, dtype=float) + rng.normal(0, 8.0 * level, (72, 96, 3))
        return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    from io import BytesIO

    buffer = BytesIO()
    image.save(buffer, format="JPEG", quality=60 - 18 * level)
    return Image.open(buffer).convert("RGB")


@pytest.fixture
def kadid(tmp_path: Path) -> Path:
    """A KADID-10k folder (``dmos.csv``, ``images/``): two references, three distortion types
    at three levels each, and two images of a fourth type; MOS falls with the level."""
    root = tmp_path / "kadid10k"
    (root / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    records = []
    for ref in (1, 2):
        reference = Image.fromarray(natural_image(ref, (96, 72)))
        reference.save(root / "images" / f"I{ref:02d}.png")
        for kind in TYPES:
            for level in (1, 2, 3):
                name = f"I{ref:02d}_{kind:02d}_{level:02d}.png"
                distort(reference, kind, level, rng).save(root / "images" / name)
                records.append([name, f"I{ref:02d}.png", 4.6 - 1.1 * level + 0.1 * ref, 0.5])
        name = f"I{ref:02d}_25_01.png"
        Image.fromarray(natural_image(ref + 5, (96, 72))).save(root / "images" / name)
        records.append([name, f"I{ref:02d}.png", 3.0 + ref * 0.5, 0.5])
    with (root / "dmos.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["dist_img", "ref_img", "dmos", "var"])
        writer.writerows(records)
    return root


def test_report_and_compare_write_figures_and_break_down_by_distortion(tmp_path, kadid):
    env = {
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_BROKER_URL": "",
        "COLUMNS": "200",
    }
    ids = []
    for tools in ("PSNR,SSIM", "PSNR"):
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                "--dataset",
                "kadid10k",
                "--root",
                str(kadid),
                "--mode",
                "tools",
                "--tools",
                tools,
            ],
            env=env,
        )
        assert result.exit_code == 0, result.output
        ids.append(result.stdout.strip().splitlines()[0])

    figures, page = tmp_path / "paper" / "figures", tmp_path / "report.html"
    result = runner.invoke(
        app,
        [
            "eval",
            "report",
            ids[0],
            "--json",
            "--bootstrap",
            "0",
            "--figures",
            str(figures),
            "--html",
            str(page),
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    names = ["scatter-tool-PSNR", "scatter-tool-SSIM", "breakdown-distortion", "breakdown-level"]
    written = [f"wrote {figures / f'{name}.{fmt}'}" for name in names for fmt in ("svg", "pdf")]
    assert [line for line in result.stderr.splitlines() if line.startswith("wrote ")] == [
        *written,
        f"wrote {page}",
    ]
    for name in names:
        assert (figures / f"{name}.pdf").read_bytes().startswith(b"%PDF")
        ET.parse(figures / f"{name}.svg")
    scatter = ET.parse(figures / "scatter-tool-PSNR.svg").getroot()
    (points,) = [node for node in scatter.iter() if node.get("id") == "scatter-tool-PSNR-points"]
    assert len(list(points.iter(f"{SVG}use"))) == 20
    assert scatter.find(f"{SVG}title").text == "PSNR vs MOS"

    document = json.loads(result.stdout)
    result_by = document["breakdown"]
    assert result_by["lines"] == ["PSNR", "SSIM"]
    assert [(g["group"], g["n"]) for g in result_by["distortion"]] == [
        ("gaussian_blur", 6),
        ("jpeg", 6),
        ("white_noise", 6),
        ("contrast_change", 2),
    ]
    assert [(g["group"], g["n"]) for g in result_by["level"]] == [("1", 8), ("2", 6), ("3", 6)]
    assert result_by["distortion"][3]["lines"]["PSNR"] == {"n": 2, "srcc": None, "plcc": None}
    export = tmp_path / "rows.csv"
    assert runner.invoke(app, ["eval", "export", ids[0], "-o", str(export)], env=env).exit_code == 0
    with export.open(newline="") as handle:
        blur = [row for row in csv.DictReader(handle) if "_01_" in row["item_id"]]
    assert result_by["distortion"][0]["lines"]["SSIM"]["srcc"] == pytest.approx(
        stats.spearmanr(
            [float(row["tool:SSIM"]) for row in blur], [float(row["mos"]) for row in blur]
        ).statistic
    )

    html = page.read_text(encoding="utf-8")
    assert html.count("<svg ") == 4 and '<table id="breakdown-distortion">' in html
    text = runner.invoke(app, ["eval", "report", ids[0], "--bootstrap", "0"], env=env).stdout
    assert "By distortion type" in text and "gaussian_blur" in text

    compared = tmp_path / "compare-figures"
    result = runner.invoke(
        app,
        [
            "eval",
            "compare",
            ids[0],
            ids[1],
            "--bootstrap",
            "100",
            "--figures",
            str(compared),
            "--html",
            str(tmp_path / "compare.html"),
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {compared / 'paired-differences.svg'}" in result.stderr
    assert (compared / "paired-differences.pdf").read_bytes().startswith(b"%PDF")
    root = ET.parse(compared / "paired-differences.svg").getroot()
    (srcc,) = [node for node in root.iter() if node.get("id") == "paired-differences-srcc"]
    assert len(list(srcc.iter(f"{SVG}use"))) == 2  # SSIM and the second job's PSNR
    assert 'id="figure-paired-differences"><svg ' in (tmp_path / "compare.html").read_text()

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    refused = runner.invoke(
        app, ["eval", "report", ids[0], "--bootstrap", "0", "--figures", str(blocked)], env=env
    )
    assert refused.exit_code == 1 and "cannot write figures into" in refused.stderr


def test_compare_names_lines_by_label_and_a_group_gets_a_page_and_figures(tmp_path, kadid):
    env = {
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_BROKER_URL": "",
        "COLUMNS": "200",
    }
    ids = []
    for tool, name in (("PSNR", "psnr-run"), ("SSIM", "second")):
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                "--dataset",
                "kadid10k",
                "--root",
                str(kadid),
                "--mode",
                "tools",
                "--tools",
                tool,
                "--group",
                "paper",
                "--name",
                name,
            ],
            env=env,
        )
        assert result.exit_code == 0, result.output
        ids.append(result.stdout.strip().splitlines()[0])

    figures, page = tmp_path / "figures", tmp_path / "compare.html"
    result = runner.invoke(
        app,
        [
            "eval",
            "compare",
            ids[0],
            ids[1],
            "--bootstrap",
            "50",
            "--json",
            "--label",
            f"{ids[1][:8]}=Ours <v2>",
            "--figures",
            str(figures),
            "--html",
            str(page),
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # The job's name where it has one, the label where one is given; ids stay in "label".
    assert [line["name"] for line in doc["lines"]] == ["psnr-run", "Ours <v2>: SSIM"]
    assert [line["label"] for line in doc["lines"]] == [
        f"{ids[0][:8]} tools/PSNR",
        f"{ids[1][:8]} tools/SSIM",
    ]
    root = ET.parse(figures / "paired-differences.svg").getroot()
    texts = [node.text or "" for node in root.iter(f"{SVG}text")]
    assert "Ours <v2>: SSIM" in texts and "Difference from the baseline psnr-run" in texts
    assert not [text for text in texts if ids[0][:8] in text or ids[1][:8] in text]
    html = page.read_text(encoding="utf-8")
    assert f'title="{ids[1][:8]} tools/SSIM">Ours &lt;v2&gt;: SSIM</td>' in html
    assert "Baseline: psnr-run" in html

    for wrong in (["--label", ids[1]], ["--label", f"{ids[1]}="]):
        refused = runner.invoke(app, ["eval", "compare", ids[0], ids[1], *wrong], env=env)
        assert refused.exit_code == 2 and "give JOB=NAME" in refused.stderr

    drawn, group_page = tmp_path / "group-figures", tmp_path / "group.html"
    result = runner.invoke(
        app,
        ["eval", "compare", "--group", "paper", "--html", str(group_page), "--figures", str(drawn)],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {drawn / 'group-srcc.svg'}" in result.stderr
    assert (drawn / "group-srcc.pdf").read_bytes().startswith(b"%PDF")
    root = ET.parse(drawn / "group-srcc.svg").getroot()
    bars = sorted(
        node.get("id") for node in root.iter() if (node.get("id") or "").startswith("group-srcc-")
    )
    assert bars == ["group-srcc-0-0", "group-srcc-0-1"]  # one dataset, PSNR and SSIM
    assert {"tools/PSNR", "tools/SSIM"} <= {node.text for node in root.iter(f"{SVG}text")}
    assert '<figure class="plot" id="figure-group-srcc"><svg ' in group_page.read_text(
        encoding="utf-8"
    )
    refused = runner.invoke(app, ["eval", "compare", "--group", "paper", "--label", "a=b"], env=env)
    assert refused.exit_code == 2 and "--label" in refused.stderr
