"""``agentic-iqa tools run BRISQUE,NIQE PATH...`` scores every image with several
tools at once: one row per image, a ``tool:NAME`` (1-5) and a ``raw:NAME`` column per tool,
each image read and decoded once for all of them.

PIQE needs no weights; NIQE's parameter file comes from the shared data folder.  NIQE measures
96x96 and up, so a 64x64 image is one a tool refuses while the other scores it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image, ImageFilter
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.cli.conftest import csv_rows
from tests.conftest import natural_image

runner = CliRunner()


@pytest.fixture
def env(weights_dir: Path) -> dict[str, str]:
    return {
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_WEIGHTS_DIR": str(weights_dir),
    }


@pytest.fixture
def blur_series_folder(tmp_path: Path) -> Path:
    """b0.png (sharp) .. b2.png (blurred), 128x128, and small.png, 64x64."""
    folder = tmp_path / "photos"
    folder.mkdir()
    sharp = Image.fromarray(natural_image(size=(128, 128)))
    for index, radius in enumerate((0, 1.5, 3)):
        (sharp.filter(ImageFilter.GaussianBlur(radius)) if radius else sharp).save(
            folder / f"b{index}.png"
        )
    Image.fromarray(natural_image(1, size=(64, 64))).save(folder / "small.png")
    return folder


def test_several_tools_give_one_row_per_image_with_each_tools_scores(blur_series_folder, env):
    result = runner.invoke(
        app, ["tools", "run", "PIQE,NIQE,piqe", str(blur_series_folder), "--format", "csv"], env=env
    )
    assert result.exit_code == 0, result.output
    rows = csv_rows(result.stdout)
    assert list(rows[0]) == [
        "image",
        "reference",
        "tool:PIQE",
        "raw:PIQE",
        "tool:NIQE",
        "raw:NIQE",
        "seconds",
        "cached",
        "error",
    ]  # piqe counted once
    assert [Path(row["image"]).name for row in rows] == ["b0.png", "b1.png", "b2.png", "small.png"]
    for name in ("PIQE", "NIQE"):  # the same scores as the tool run alone
        alone = {
            Path(row["image"]).name: row
            for row in csv_rows(
                runner.invoke(
                    app, ["tools", "run", name, str(blur_series_folder), "--format", "csv"], env=env
                ).stdout
            )
        }
        for row in rows:
            expected = alone[Path(row["image"]).name]["raw_score"]
            if not expected:  # the tool alone could not score it either
                assert row[f"raw:{name}"] == row[f"tool:{name}"] == ""
                continue
            assert float(row[f"raw:{name}"]) == pytest.approx(float(expected))
            assert 1 <= float(row[f"tool:{name}"]) <= 5
    small = rows[-1]
    assert small["raw:PIQE"] != "" and small["raw:NIQE"] == ""
    assert small["error"].startswith("NIQE: ") and "96" in small["error"]
    assert all(row["error"] == "" for row in rows[:3])
    assert "0 of 4 images could not be scored by any tool, 1 by only some" in result.stderr


def test_each_image_is_read_and_decoded_once_for_all_the_tools(
    blur_series_folder, env, monkeypatch
):
    import iqa_tools.images as images

    decoded: Counter[str] = Counter()
    decode = images.decode_stored

    def counted(data: bytes, path: str):  # noqa: ANN202 - the real decode, counted
        decoded[Path(path).name] += 1
        return decode(data, path)

    monkeypatch.setattr(images, "decode_stored", counted)
    result = runner.invoke(
        app,
        ["tools", "run", "PIQE,NIQE", str(blur_series_folder), "--no-cache", "--format", "jsonl"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 4
    assert decoded == Counter({"b0.png": 1, "b1.png": 1, "b2.png": 1, "small.png": 1})


def test_json_and_the_table_carry_a_column_per_tool(blur_series_folder, env):
    rows = json.loads(
        runner.invoke(
            app,
            ["tools", "run", "PIQE,NIQE", str(blur_series_folder / "b0.png"), "--json"],
            env=env,
        ).stdout
    )
    assert len(rows) == 1 and isinstance(rows[0]["raw:NIQE"], float)
    assert rows[0]["error"] is None and rows[0]["cached"] is False
    table = runner.invoke(
        app, ["tools", "run", "PIQE,NIQE", str(blur_series_folder)], env={**env, "COLUMNS": "200"}
    )
    assert table.exit_code == 0, table.output
    assert "PIQE raw" in table.stdout and "NIQE (1-5)" in table.stdout
    assert sum("b0.png" in line or "small.png" in line for line in table.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    ("tools", "extra", "code", "message"),
    [
        ("PIQE,NIQE", ["--fallback"], 2, "--fallback lets another tool answer for one tool"),
        ("PIQE,NOSUCH", [], 1, "NOSUCH"),
        (" , ", [], 2, "no tool named"),
        ("PIQE,SSIM", [], 2, "SSIM is a full-reference tool: give --reference REF"),
    ],
)
def test_several_tools_that_cannot_run_together_are_one_error(
    blur_series_folder, env, tools, extra, code, message
):
    result = runner.invoke(app, ["tools", "run", tools, str(blur_series_folder), *extra], env=env)
    assert result.exit_code == code
    assert message in " ".join(result.stderr.split()) and result.stdout == ""
