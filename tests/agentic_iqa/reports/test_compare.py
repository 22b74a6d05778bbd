"""``eval compare``: jobs against MOS or MCQ truth, and their paired differences from a baseline."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFilter
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.reports.compare import build_comparison
from agentic_iqa.reports.compare_html import render_html
from agentic_iqa.reports.compare_text import render_text
from agentic_iqa.reports.in_sample import FITTED_IMAGES
from agentic_iqa.reports.metrics import plcc, srcc
from tests.conftest import natural_image

runner = CliRunner()


def job(job_id: str, name: str = "job", **extra) -> dict:
    return {
        "id": job_id,
        "name": name,
        "status": "done",
        "backend": "openai",
        "model": "gpt-4o",
        "tools": None,
        "created_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:01:40+00:00",
        **extra,
    }


def rows(scores, mos, prefix: str = "i") -> list[dict]:
    return [
        {
            "item_id": f"{prefix}{k}",
            "image": f"/nowhere/{k}.png",
            "status": "done",
            "quality_score": float(s),
            "mos": float(m),
        }
        for k, (s, m) in enumerate(zip(scores, mos, strict=True))
    ]


@pytest.fixture(scope="module")
def opinion() -> tuple[np.ndarray, np.ndarray]:
    """MOS of 200 items and a job that reads them with noise as large as their spread."""
    rng = np.random.default_rng(7)
    mos = rng.normal(50.0, 15.0, 200)
    return mos, mos + rng.normal(0.0, 15.0, 200)


def test_a_noisy_job_is_worse_than_an_exact_one_by_about_the_true_difference(opinion):
    mos, noisy = opinion
    doc = build_comparison(
        [
            (job("aaaaaaaa-1", "exact"), rows(mos, mos)),
            (job("bbbbbbbb-2", "noisy"), rows(noisy, mos)),
        ],
        bootstrap=500,
    )
    exact_line, noisy_line = doc["lines"]
    assert doc["baseline"] == "aaaaaaaa agent" and exact_line["difference"] is None
    assert exact_line["mos"]["srcc"] == pytest.approx(1.0)
    diff = noisy_line["difference"]
    assert diff["n"] == 200 and doc["jobs"][1]["shared_with_baseline"] == 200
    assert diff["srcc"] == pytest.approx(srcc(noisy, mos) - 1.0)
    assert diff["plcc"] == pytest.approx(plcc(noisy, mos) - 1.0)
    # Population values for a binormal pair with correlation 1/sqrt(2): Pearson's is that,
    # Spearman's (6/pi) asin(rho/2).
    true_plcc = 1 / np.sqrt(2) - 1
    true_srcc = 6 / np.pi * np.arcsin(1 / np.sqrt(2) / 2) - 1
    for name, truth in (("plcc", true_plcc), ("srcc", true_srcc)):
        low, high = diff[f"{name}_ci"]
        assert low <= truth <= high < 0, (name, low, high)
    assert diff["krcc_ci"][1] < 0
    assert doc["jobs"][0]["wall_time_per_item_s"] == pytest.approx(0.5)
    text = render_text(doc)
    assert "bbbbbbbb agent" in text and "paired" in text
    json.dumps(doc, allow_nan=False)


def test_identical_jobs_differ_by_exactly_nothing(opinion):
    mos, noisy = opinion
    doc = build_comparison(
        [(job("aaaaaaaa-1"), rows(noisy, mos)), (job("cccccccc-3"), rows(noisy, mos))],
        bootstrap=200,
    )
    diff = doc["lines"][1]["difference"]
    for name in ("srcc", "plcc", "krcc"):
        assert diff[name] == 0.0 and diff[f"{name}_ci"] == [0.0, 0.0]


def test_jobs_without_shared_items_say_so(opinion):
    mos, noisy = opinion
    doc = build_comparison(
        [
            (job("aaaaaaaa-1"), rows(mos, mos)),
            (job("dddddddd-4"), rows(noisy, mos, prefix="other")),
        ],
        bootstrap=50,
    )
    diff = doc["lines"][1]["difference"]
    assert diff["n"] == 0 and diff["srcc"] is None and diff["srcc_ci"] is None
    assert "no item is scored by both" in diff["reason"]
    assert doc["jobs"][1]["shared_with_baseline"] == 0
    assert "no item is scored by both" in render_text(doc)


def mcq_rows(right: int, total: int = 50) -> list[dict]:
    return [
        {
            "item_id": f"q{k}",
            "image": f"/nowhere/{k}.png",
            "status": "done",
            "final_answer": "B" if k < right else "C",
            "answer_truth": "B",
        }
        for k in range(total)
    ]


def test_mcq_accuracy_and_its_paired_difference():
    doc = build_comparison(
        [(job("aaaaaaaa-1", mode="vlm"), mcq_rows(30)), (job("eeeeeeee-5"), mcq_rows(40))],
        bootstrap=500,
    )
    first, second = doc["lines"]
    assert (first["source"], first["mcq"]["accuracy"], second["mcq"]["accuracy"]) == (
        "vlm",
        0.6,
        0.8,
    )
    diff = second["mcq_difference"]
    assert diff["n"] == 50 and diff["accuracy"] == pytest.approx(0.2)
    low, high = diff["accuracy_ci"]
    assert 0 < low <= 0.2 <= high  # the second is right wherever the first is, and more
    assert "MCQ accuracy" in render_text(doc)


def test_a_metric_job_is_one_line_per_tool_and_html_escapes_names(tmp_path, opinion):
    mos, noisy = opinion
    tools = [
        {**row, "quality_score": None, "tool:BRISQUE": row["quality_score"], "tool:NIQE": float(m)}
        for row, m in zip(rows(noisy, mos), mos, strict=True)
    ]
    doc = build_comparison(
        [
            (job("ffffffff-6", "<script>alert(1)</script>", tools=["BRISQUE", "NIQE"]), tools),
            (job("aaaaaaaa-1"), rows(mos, mos)),
        ],
        bootstrap=100,
    )
    assert [line["label"] for line in doc["lines"]] == [
        "ffffffff tools/BRISQUE",
        "ffffffff tools/NIQE",
        "aaaaaaaa agent",
    ]
    assert doc["lines"][1]["difference"]["srcc"] == pytest.approx(1.0 - srcc(noisy, mos))
    page = render_html(doc, tmp_path / "compare.html").read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "ffffffff tools/NIQE" in page


def test_builtin_jobs_on_fitted_photos_are_flagged(tmp_path, livec_dir):
    photo = next(iter(sorted((livec_dir / "images").iterdir())))
    copy = shutil.copyfile(photo, tmp_path / "renamed.jpg")
    other = tmp_path / "fresh.png"
    Image.fromarray(natural_image(3)).save(other)
    items = [
        {"item_id": "a", "image": str(copy), "status": "done", "quality_score": 3.0},
        {"item_id": "b", "image": str(other), "status": "done", "quality_score": 2.0},
        {"item_id": "c", "image": str(tmp_path / "gone.png"), "status": "failed"},
    ]
    builtin = job(
        "11111111-7",
        backend="builtin",
        configuration={"roles": {"planner": {"backend": "builtin", "model": None}}},
    )
    doc = build_comparison(
        [(job("22222222-8", tools=["NIQE"]), items), (builtin, items)], bootstrap=0
    )
    assert doc["jobs"][0]["fitted_overlap"] is None  # a metric job asks no backend
    assert doc["jobs"][1]["fitted_overlap"] == {"items": 1, "of": 3, "unreadable": 1}
    assert (
        "1 of 3 items of job 11111111 are images the builtin backend was fitted on: its "
        "figures on them are in-sample"
    ) in doc["warnings"]


def test_the_fitted_list_is_every_livec_dev_photo(livec_dir):
    import hashlib

    listed = json.loads(FITTED_IMAGES.read_text(encoding="utf-8"))
    photos = sorted((livec_dir / "images").iterdir())
    assert listed["sets"]["livec-dev"]["count"] == len(photos) == len(listed["sha256"]) == 250
    for photo in photos[::25]:
        digest = hashlib.sha256(photo.read_bytes()).hexdigest()
        assert listed["sha256"][digest] == f"livec-dev/{photo.name}"


# -- the command, on two real metric jobs ---------------------------------------------------------


def manifest(folder: Path) -> Path:
    """Twelve photo-like images, blurred or noisy to growing degrees, MOS falling with it."""
    rng = np.random.default_rng(0)
    lines = []
    for index in range(12):
        level = index // 2
        image = Image.fromarray(natural_image(index % 3, (192, 144)))
        if index % 2:
            image = image.filter(ImageFilter.GaussianBlur(0.8 * level))
        else:
            pixels = np.asarray(image, dtype=float) + rng.normal(0, 6.0 * level, (144, 192, 3))
            image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        image.save(folder / f"img{index:02d}.png")
        lines.append([f"img{index:02d}.png", 90 - 12 * level + index % 3])
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        writer.writerows(lines)
    return path


@pytest.mark.slow
def test_compare_two_metric_jobs_from_the_command_line(tmp_path, weights_dir):
    from agentic_iqa.cli.eval import export_rows
    from agentic_iqa.db import make_engine

    url = f"sqlite:///{tmp_path / 'r.db'}"
    env = {
        "AGENTIC_IQA_DATABASE_URL": url,
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_WEIGHTS_DIR": str(weights_dir),
        "AGENTIC_IQA_BROKER_URL": "",
        "COLUMNS": "200",
    }
    path = manifest(tmp_path)
    ids = []
    for tool in ("BRISQUE", "NIQE"):
        result = runner.invoke(
            app, ["eval", "submit", str(path), "--tools", tool, "--name", f"only {tool}"], env=env
        )
        assert result.exit_code == 0, result.output
        ids.append(result.stdout.strip().splitlines()[0])

    page = tmp_path / "compare.html"
    result = runner.invoke(
        app,
        [
            "eval",
            "compare",
            ids[0][:8],
            ids[1],
            "--json",
            "--html",
            str(page),
            "--bootstrap",
            "200",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [line["label"] for line in doc["lines"]] == [
        f"{ids[0][:8]} tools/BRISQUE",
        f"{ids[1][:8]} tools/NIQE",
    ]
    engine = make_engine(url)
    for line, job_id, tool in zip(doc["lines"], ids, ("BRISQUE", "NIQE"), strict=True):
        exported = list(export_rows(engine, job_id)[1])
        scores = [row[f"tool:{tool}"] for row in exported]
        assert line["mos"]["n"] == 12
        assert line["mos"]["srcc"] == pytest.approx(srcc(scores, [r["mos"] for r in exported]))
    assert doc["lines"][1]["difference"]["n"] == 12
    assert doc["lines"][1]["difference"]["srcc"] == pytest.approx(
        doc["lines"][1]["mos"]["srcc"] - doc["lines"][0]["mos"]["srcc"]
    )
    assert [
        (j["items"], j["shared_with_baseline"], j["cost_per_item_usd"]) for j in doc["jobs"]
    ] == [(12, 12, 0.0), (12, 12, 0.0)]
    assert doc["warnings"] == [] and "only NIQE" in page.read_text(encoding="utf-8")

    text = runner.invoke(app, ["eval", "compare", ids[0], ids[1], "--bootstrap", "200"], env=env)
    assert text.exit_code == 0, text.output
    assert f"Baseline: {ids[0][:8]} tools/BRISQUE" in text.stdout
    assert "wall time/item" in text.stdout and "ΔSRCC" in text.stdout
    print(text.stdout)

    alone = runner.invoke(app, ["eval", "compare", ids[0]], env=env)
    assert alone.exit_code == 2 and "at least two jobs" in alone.output


def questions(right_images: set[int], images: int = 20, per_image: int = 5) -> list[dict]:
    """``per_image`` questions about each image, answered right on ``right_images`` only."""
    return [
        {
            "item_id": f"q{k}-{n}",
            "image": f"/nowhere/{k}.png",
            "status": "done",
            "final_answer": "B" if k in right_images else "C",
            "answer_truth": "B",
        }
        for k in range(images)
        for n in range(per_image)
    ]


def test_questions_about_one_image_are_resampled_together():
    """Five questions per photo whose answers stand or fall together carry the information of
    one: the paired interval must be as wide as for 20 independent questions, not 100."""
    base, better = questions(set(range(10))), questions(set(range(14)))
    doc = build_comparison([(job("aaaaaaaa-1"), base), (job("bbbbbbbb-2"), better)], bootstrap=2000)
    diff = doc["lines"][1]["mcq_difference"]
    assert (diff["n"], diff["images"], diff["accuracy"]) == (100, 20, pytest.approx(0.2))
    low, high = diff["accuracy_ci"]
    # 4 of 20 images gained: the difference is a share of 20 draws, 0.2 +- ~0.18.
    assert low <= 0.05 and high >= 0.35

    def alone(rows: list[dict]) -> list[dict]:  # the same answers, each its own image
        return [{**row, "image": f"/nowhere/{row['item_id']}.png"} for row in rows]

    naive = build_comparison(
        [(job("aaaaaaaa-1"), alone(base)), (job("bbbbbbbb-2"), alone(better))], bootstrap=2000
    )["lines"][1]["mcq_difference"]
    assert naive["images"] == 100
    assert (high - low) > 1.8 * (naive["accuracy_ci"][1] - naive["accuracy_ci"][0])


def test_scores_of_one_image_are_resampled_together(opinion):
    mos, noisy = opinion
    per_image = 4  # four items (say, four prompts) about each of 50 images
    grouped = [
        {**row, "image": f"/nowhere/{k // per_image}.png"} for k, row in enumerate(rows(noisy, mos))
    ]
    exact = [
        {**row, "image": f"/nowhere/{k // per_image}.png"} for k, row in enumerate(rows(mos, mos))
    ]
    together = build_comparison(
        [(job("aaaaaaaa-1"), exact), (job("bbbbbbbb-2"), grouped)], bootstrap=300
    )["lines"][1]["difference"]
    apart = build_comparison(
        [(job("aaaaaaaa-1"), rows(mos, mos)), (job("bbbbbbbb-2"), rows(noisy, mos))], bootstrap=300
    )["lines"][1]["difference"]
    assert together["srcc"] == pytest.approx(apart["srcc"])  # the point estimate is the same
    assert together["srcc_ci"] != apart["srcc_ci"]  # the draws are images, not items
    low, high = together["srcc_ci"]
    assert low < together["srcc"] < high < 0
