"""``agentic-iqa tools run TOOL PATH...`` over folders, globs and lists of images.

PIQE and SSIM need no weight files, so these run on any machine; the images are small
generated ones, sharp and blurred, so the scores differ and say which is which.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image, ImageFilter
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.cli.conftest import csv_rows
from tests.conftest import natural_image

runner = CliRunner()
ENV = {"AGENTIC_IQA_TOOL_CACHE": "memory", "AGENTIC_IQA_DEVICE": "cpu"}


@pytest.fixture
def folder_with_strays(tmp_path: Path) -> Path:
    """b0.png (sharp) .. b2.png (most blurred), a corrupt bad.jpg, a note and a subfolder."""
    folder = tmp_path / "photos"
    (folder / "sub").mkdir(parents=True)
    sharp = Image.fromarray(natural_image(size=(64, 64)))
    for index, radius in enumerate((0, 1.5, 3)):
        image = sharp.filter(ImageFilter.GaussianBlur(radius)) if radius else sharp
        image.save(folder / f"b{index}.png")
    sharp.save(folder / "sub" / "deep.png")
    (folder / "notes.txt").write_text("not an image, and not taken from a folder")
    return folder


def test_a_folder_gives_one_csv_row_per_image_on_a_clean_stdout(folder_with_strays):
    from iqa_tools.registry import metric_creations

    before = metric_creations()["PIQE"]
    result = runner.invoke(
        app, ["tools", "run", "PIQE", str(folder_with_strays), "--format", "csv"], env=ENV
    )
    assert result.exit_code == 0, result.output
    rows = csv_rows(result.stdout)  # stdout holds the CSV and nothing else
    assert [row["image"] for row in rows] == [
        str(folder_with_strays / f"b{i}.png") for i in range(3)
    ]
    assert {row["tool"] for row in rows} == {"PIQE"}
    assert all(row["error"] == "" and row["lower_is_better"] == "True" for row in rows)
    quality = [float(row["normalized_score"]) for row in rows]
    assert all(1 <= q <= 5 for q in quality)
    assert quality[0] > quality[2]  # the sharp image beats the most blurred one
    assert float(rows[0]["raw_score"]) < float(rows[2]["raw_score"])  # PIQE: lower is better
    assert metric_creations()["PIQE"] - before <= 1  # the model is built once, not per image
    assert "is a directory" not in result.output
    deep = runner.invoke(
        app,
        ["tools", "run", "PIQE", str(folder_with_strays), "--recursive", "--format", "csv"],
        env=ENV,
    )
    assert [row["image"] for row in csv_rows(deep.stdout)][-1] == str(
        folder_with_strays / "sub" / "deep.png"
    )


def test_a_quoted_glob_is_expanded_and_one_matching_nothing_is_refused(folder_with_strays):
    result = runner.invoke(
        app,
        ["tools", "run", "PIQE", str(folder_with_strays / "b[02].png"), "--format", "csv"],
        env=ENV,
    )
    assert result.exit_code == 0, result.output
    assert [row["image"] for row in csv_rows(result.stdout)] == [
        str(folder_with_strays / "b0.png"),
        str(folder_with_strays / "b2.png"),
    ]
    nothing = runner.invoke(
        app, ["tools", "run", "PIQE", str(folder_with_strays / "*.webp")], env=ENV
    )
    assert nothing.exit_code == 2
    assert f"no file matches the pattern {str(folder_with_strays / '*.webp')!r}" in nothing.stderr
    empty = folder_with_strays / "sub" / "empty"
    empty.mkdir()
    none_here = runner.invoke(app, ["tools", "run", "PIQE", str(empty)], env=ENV)
    assert none_here.exit_code == 2 and f"in {empty}" in none_here.stderr


def test_a_corrupt_image_is_a_row_with_its_error_and_the_others_score(folder_with_strays):
    (folder_with_strays / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    result = runner.invoke(
        app, ["tools", "run", "PIQE", str(folder_with_strays), "--format", "csv"], env=ENV
    )
    assert result.exit_code == 0, result.output
    rows = {Path(row["image"]).name: row for row in csv_rows(result.stdout)}
    assert sorted(rows) == ["b0.png", "b1.png", "b2.png", "bad.jpg"]
    assert rows["bad.jpg"]["raw_score"] == "" and "cannot load image" in rows["bad.jpg"]["error"]
    assert all(float(rows[name]["raw_score"]) >= 0 for name in ("b0.png", "b1.png", "b2.png"))
    assert "1 of 4 images could not be scored" in result.stderr
    only_bad = runner.invoke(
        app,
        [
            "tools",
            "run",
            "PIQE",
            str(folder_with_strays / "bad.jpg"),
            str(folder_with_strays / "gone.png"),
            "--format",
            "csv",
        ],
        env=ENV,
    )
    assert only_bad.exit_code == 1  # every image failed
    assert [row["error"] != "" for row in csv_rows(only_bad.stdout)] == [True, True]
    assert "no image could be scored: 2 failed" in only_bad.stderr


def test_json_is_one_list_and_jsonl_one_object_a_line(folder_with_strays):
    result = runner.invoke(
        app, ["tools", "run", "PIQE", str(folder_with_strays), "--format", "json"], env=ENV
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [Path(row["image"]).name for row in rows] == ["b0.png", "b1.png", "b2.png"]
    assert all(isinstance(row["raw_score"], float) and row["error"] is None for row in rows)
    flag = runner.invoke(app, ["tools", "run", "PIQE", str(folder_with_strays), "--json"], env=ENV)
    assert [row["image"] for row in json.loads(flag.stdout)] == [row["image"] for row in rows]
    lines = runner.invoke(
        app, ["tools", "run", "PIQE", str(folder_with_strays), "--format", "jsonl"], env=ENV
    ).stdout.splitlines()
    assert [json.loads(line)["image"] for line in lines] == [row["image"] for row in rows]


def test_output_file_and_dash_for_stdout(folder_with_strays, tmp_path):
    target = tmp_path / "out" / "scores.csv"
    result = runner.invoke(
        app, ["tools", "run", "PIQE", str(folder_with_strays), "-o", str(target)], env=ENV
    )  # the format from the extension
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert len(csv_rows(target.read_text())) == 3
    assert f"wrote 3 rows to {target}" in " ".join(result.stderr.split())
    listed = tmp_path / "scores.json"
    runner.invoke(
        app, ["tools", "run", "PIQE", str(folder_with_strays), "-o", str(listed)], env=ENV
    )
    assert len(json.loads(listed.read_text())) == 3
    dash = runner.invoke(
        app,
        ["tools", "run", "PIQE", str(folder_with_strays / "b0.png"), "-o", "-", "--format", "csv"],
        env=ENV,
    )
    assert dash.exit_code == 0 and [row["image"] for row in csv_rows(dash.stdout)] == [
        str(folder_with_strays / "b0.png")
    ]


def test_csv_cells_cannot_start_a_formula(folder_with_strays, monkeypatch):
    monkeypatch.chdir(folder_with_strays)
    Image.open("b0.png").save("=HYPERLINK(1).png")
    result = runner.invoke(
        app, ["tools", "run", "PIQE", "=HYPERLINK(1).png", "b1.png", "--format", "csv"], env=ENV
    )
    assert result.exit_code == 0, result.output
    assert [row["image"] for row in csv_rows(result.stdout)] == ["'=HYPERLINK(1).png", "b1.png"]


def test_the_tool_cache_answers_a_second_run(folder_with_strays, tmp_path):
    env = {**ENV, "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{tmp_path / 'cache.sqlite3'}"}
    args = ["tools", "run", "PIQE", str(folder_with_strays), "--format", "json"]
    first = json.loads(runner.invoke(app, args, env=env).stdout)
    second = json.loads(runner.invoke(app, args, env=env).stdout)
    assert [row["cached"] for row in first] == [False] * 3
    assert [row["cached"] for row in second] == [True] * 3
    assert [row["raw_score"] for row in second] == [row["raw_score"] for row in first]
    fresh = json.loads(runner.invoke(app, [*args, "--no-cache"], env=env).stdout)
    assert [row["cached"] for row in fresh] == [False] * 3


def test_full_reference_tools_pair_images_by_name_in_reference_dir(folder_with_strays, tmp_path):
    references = tmp_path / "refs"
    references.mkdir()
    for name in ("b0.png", "b1.png"):  # b2.png has no reference
        Image.open(folder_with_strays / "b0.png").save(references / name)
    refused = runner.invoke(app, ["tools", "run", "SSIM", str(folder_with_strays)], env=ENV)
    assert refused.exit_code == 2
    assert "SSIM is a full-reference tool: give --reference REF" in " ".join(refused.stderr.split())
    result = runner.invoke(
        app,
        [
            "tools",
            "run",
            "SSIM",
            str(folder_with_strays),
            "--reference-dir",
            str(references),
            "--format",
            "csv",
        ],
        env=ENV,
    )
    assert result.exit_code == 0, result.output
    rows = {Path(row["image"]).name: row for row in csv_rows(result.stdout)}
    assert float(rows["b0.png"]["raw_score"]) == pytest.approx(1.0)  # itself
    assert float(rows["b1.png"]["raw_score"]) < 0.99
    assert rows["b1.png"]["reference"] == str(references / "b1.png")
    assert rows["b2.png"]["raw_score"] == "" and "no reference" in rows["b2.png"]["error"]
    shared = runner.invoke(
        app,
        [
            "tools",
            "run",
            "SSIM",
            str(folder_with_strays / "b1.png"),
            str(folder_with_strays / "b2.png"),
            "--reference",
            str(folder_with_strays / "b0.png"),
            "--format",
            "json",
        ],
        env=ENV,
    )
    scores = [row["raw_score"] for row in json.loads(shared.stdout)]
    assert scores[0] > scores[1]  # more blur, further from the sharp reference


def test_a_table_by_default_and_one_image_keeps_its_old_output(folder_with_strays):
    table = runner.invoke(app, ["tools", "run", "PIQE", str(folder_with_strays)], env=ENV)
    assert table.exit_code == 0, table.output
    lines = [line for line in table.stdout.splitlines() if "b0.png" in line or "b2.png" in line]
    assert len(lines) == 2 and "PIQE" in lines[0] and "quality (1-5)" in table.stdout
    one = runner.invoke(app, ["tools", "run", "PIQE", str(folder_with_strays / "b0.png")], env=ENV)
    assert one.exit_code == 0
    assert " ".join(one.stdout.split()).startswith(
        f"PIQE on {folder_with_strays / 'b0.png'} raw score "
    )


def test_a_tool_without_weights_is_one_error_not_a_failed_row_per_image(tmp_path):
    photos = tmp_path / "large"  # NIQE measures 96x96 and up
    photos.mkdir()
    for seed in range(2):
        Image.fromarray(natural_image(seed, size=(128, 128))).save(photos / f"{seed}.png")
    result = runner.invoke(app, ["tools", "run", "NIQE", str(photos), "--format", "csv"], env=ENV)
    assert result.exit_code == 1 and result.stdout == ""
    (line,) = [" ".join(result.stderr.split())]
    assert line.startswith("error: NIQE cannot run here: missing niqe_modelparameters.mat")
    fallen = runner.invoke(
        app, ["tools", "run", "NIQE", str(photos), "--format", "csv", "--fallback"], env=ENV
    )
    assert fallen.exit_code == 0, fallen.output
    rows = csv_rows(fallen.stdout)
    assert {(row["tool"], row["fallback_from"]) for row in rows} == {("PIQE", "NIQE")}
    assert all(float(row["raw_score"]) >= 0 and row["error"] == "" for row in rows)
    assert fallen.stderr.count("fell back from NIQE to PIQE") == 1  # said once, not per image


def test_the_issues_example_brisque_on_a_folder(folder_with_strays, weights_dir):
    env = {**ENV, "AGENTIC_IQA_WEIGHTS_DIR": str(weights_dir)}
    result = runner.invoke(
        app, ["tools", "run", "brisque", f"{folder_with_strays}/", "--format", "csv"], env=env
    )
    assert result.exit_code == 0, result.output
    rows = csv_rows(result.stdout)
    assert [Path(row["image"]).name for row in rows] == ["b0.png", "b1.png", "b2.png"]
    assert all(row["tool"] == "BRISQUE" and row["error"] == "" for row in rows)
    assert all(1 <= float(row["normalized_score"]) <= 5 for row in rows)
