"""``eval estimate`` takes what ``eval submit`` takes, read by the same code; a metric
job with a model is refused with what to do; the estimate's time is warm-up plus pace.

The flags are compared as click declares them (names, types, defaults), so a flag added to one
command and not the other fails here; the behaviour is checked on real jobs with the builtin
backend and the weight-free PIQE.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.main import get_command
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.jobs.estimate import SamplePace, extrapolate
from tests.conftest import natural_image

runner = CliRunner()


def _declared(command_name: str) -> dict[str, tuple]:
    command = get_command(app).commands["eval"].commands[command_name]  # type: ignore[attr-defined]
    return {
        param.name: (
            tuple(param.opts),
            tuple(param.secondary_opts),
            repr(getattr(param, "type", None)),
            param.multiple,
            param.nargs,
            param.default,
            param.param_type_name,
            getattr(param, "help", None),
        )
        for param in command.params
    }


def test_estimate_declares_every_flag_of_submit_as_submit_declares_it() -> None:
    submit, estimate = _declared("submit"), _declared("estimate")
    assert {
        "sample",
        "seed",
        "offset",
        "limit",
        "model",
        "backend",
        "tools",
        "mode",
        "workers",
        "batch",
        "dataset",
        "root",
    } <= set(submit)
    assert {name: estimate.get(name) for name in submit} == submit
    assert set(estimate) - set(submit) == {"measure", "as_json"}


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    lines = ["image,mos"]
    for index in range(6):
        Image.fromarray(natural_image(index, size=(96, 96))).save(folder / f"p{index}.png")
        lines.append(f"p{index}.png,{index}")
    path = folder / "manifest.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_estimate_takes_model_builtin_as_submit_does(manifest, results):
    """The reviewer's `eval estimate ... --model builtin` exited "names no backend"."""
    estimate = runner.invoke(
        app,
        [
            "eval",
            "estimate",
            str(manifest),
            "--model",
            "builtin",
            "--sample",
            "4",
            "--seed",
            "1",
            "--measure",
            "3",
            "--json",
        ],
    )
    assert estimate.exit_code == 0, estimate.output
    figures = json.loads(estimate.stdout)
    assert (figures["total_items"], figures["sample_items"], figures["calls"]) == (4, 3, 0)
    assert figures["sample_failed"] == 0 and figures["wall_seconds"] > 0


@pytest.mark.parametrize("command", ["submit", "estimate"])
@pytest.mark.parametrize(
    "model_flags", [["--model", "builtin"], ["--backend", "builtin"], ["--model", "openai:gpt-4o"]]
)
def test_a_metric_job_with_a_model_is_refused_with_what_to_do(
    manifest, results, command, model_flags
):
    result = runner.invoke(
        app, ["eval", command, str(manifest), *model_flags, "--tools", "BRISQUE,PIQE"]
    )
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert "a metric job (--tools) asks no model" in line
    assert "`--mode tools --tools BRISQUE,PIQE` runs those tools alone" in line
    assert "for the agent answering with --" in line and "leave out --tools" in line
    assert not Path(results.removeprefix("sqlite:///")).exists()  # nothing stored
    alone = runner.invoke(
        app,
        [
            "eval",
            command,
            str(manifest),
            "--tools",
            "PIQE",
            "--mode",
            "tools",
            "--measure" if command == "estimate" else "--workers",
            "2",
        ],
    )
    assert alone.exit_code == 0, alone.output


def test_the_pace_is_the_first_waves_warm_up_once_then_the_later_items() -> None:
    # Two at once: items end at 10, 10.5 (the first wave: warm-up and an item each), then
    # one every 0.5 s.
    pace = SamplePace.of([10.0, 10.5, 11.0, 11.5, 12.0], concurrency=2)
    assert pace.seconds == pytest.approx(0.5)
    assert pace.warmup == pytest.approx(10.5 - 2 * 0.5)
    assert pace.wall_seconds(100) == pytest.approx(9.5 + 100 * 0.5)
    assert SamplePace.of([12.0, 10.0, 11.0], concurrency=1) == SamplePace.of(
        [10.0, 11.0, 12.0], concurrency=1
    )  # the order they were told in does not matter
    alone = SamplePace.of([4.0, 4.2], concurrency=4)  # one wave: all pace, no warm-up
    assert (alone.warmup, alone.seconds) == (0.0, pytest.approx(2.1))
    sample = {
        "calls": 0,
        "input_tokens": 0,
        "cached_tokens": 0,
        "output_tokens": 0,
        "cost_usd": 0.0,
    }
    result = extrapolate(
        sample, sample_items=5, sample_seconds=12.0, total_items=100, concurrency=2, pace=pace
    )
    assert result["wall_seconds"] == pytest.approx(59.5)
    assert (result["warmup_seconds"], result["seconds_per_item"]) == (
        pytest.approx(9.5),
        pytest.approx(0.5),
    )
    with pytest.raises(ValueError):
        SamplePace.of([], concurrency=2)
