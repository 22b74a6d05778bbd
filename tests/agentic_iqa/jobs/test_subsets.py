"""A job on part of its source.  ``--sample N --seed S`` draws N rows by a seeded
hash of each row's identity (the same rows for the same seed, whatever the rows' order),
``--offset K`` skips rows, and the choice is stored with the job and shown by ``eval list``,
``eval report`` and the summary of ``eval submit`` and ``eval resume``.

The rule is tested on the pure selection (:mod:`agentic_iqa.jobs.subset`) over many seeds and
orders, and end to end on manifests and on a public dataset's own files, with the weight-free
PIQE as a metric job (no model, so fast).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import make_engine
from agentic_iqa.db.engine import read_scope
from agentic_iqa.db.models import Job, JobItem
from agentic_iqa.jobs.subset import Subset, row_identity
from agentic_iqa.runtime import lifecycle
from tests.conftest import natural_image
from tests.dataset_roots import koniq_root

runner = CliRunner()


def _rows(count: int) -> list[tuple[int, dict[str, str]]]:
    return [
        (index + 2, {"image": f"img/{index:03d}.png", "mos": str(index)}) for index in range(count)
    ]


def _chosen(subset: Subset, rows: list[tuple[int, dict[str, str]]]) -> list[str]:
    return [row["image"] for _, row in subset.apply(rows)]


def test_a_seeded_sample_is_n_rows_the_same_for_the_seed_whatever_their_order() -> None:
    rows = _rows(200)
    for seed in range(20):
        first = _chosen(Subset(sample=15, seed=seed), rows)
        assert len(first) == len(set(first)) == 15
        assert first == sorted(first)  # in the source's own order
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        assert sorted(_chosen(Subset(sample=15, seed=seed), shuffled)) == first
        assert _chosen(Subset(sample=15, seed=seed), rows) == first  # and again
    draws = {tuple(_chosen(Subset(sample=15, seed=seed), rows)) for seed in range(20)}
    assert len(draws) == 20  # each seed its own rows


def test_every_row_is_as_likely_to_be_drawn_wherever_it_stands() -> None:
    """Over 400 seeds, 10 of 100 rows: each row about 40 times, the first rows no more than
    the last (a first-N or position-biased draw fails this)."""
    rows = _rows(100)
    counts = dict.fromkeys((row["image"] for _, row in rows), 0)
    for seed in range(400):
        for image in _chosen(Subset(sample=10, seed=seed), rows):
            counts[image] += 1
    assert min(counts.values()) >= 15 and max(counts.values()) <= 70
    first, last = sum(list(counts.values())[:20]), sum(list(counts.values())[-20:])
    assert abs(first - last) < 0.35 * (first + last) / 2


def test_offset_and_limit_cut_in_file_order_and_sample_draws_from_what_they_leave() -> None:
    rows = _rows(50)
    assert _chosen(Subset(offset=10, limit=5), rows) == [f"img/{i:03d}.png" for i in range(10, 15)]
    assert _chosen(Subset(offset=48), rows) == ["img/048.png", "img/049.png"]
    within = _chosen(Subset(offset=10, limit=20, sample=5, seed=3), rows)
    assert len(within) == 5 and all("img/010.png" <= image <= "img/029.png" for image in within)
    assert _chosen(Subset(sample=80, seed=1), rows) == _chosen(Subset(), rows)  # all of 50
    for subset in (
        Subset(offset=10, limit=5),
        Subset(offset=48),
        Subset(sample=80),
        Subset(offset=45, limit=20, sample=3),
        Subset(offset=60),
    ):
        assert subset.size(50) == len(_chosen(subset, rows))


def test_a_row_is_known_by_its_id_else_its_image_and_question() -> None:
    assert row_identity(3, {"id": " a7 ", "image": "x.png"}) == row_identity(9, {"id": "a7"})
    assert row_identity(3, {"image": "./d/x.png"}) == row_identity(4, {"image": "d/x.png"})
    asked = row_identity(3, {"image": "x.png", "query": "Is it sharp?"})
    assert asked != row_identity(3, {"image": "x.png", "query": "Is it noisy?"})
    assert asked != row_identity(3, {"image": "x.png"})


def _photos(folder: Path, count: int) -> Path:
    """A CSV manifest of ``count`` distinct photo-like images with a MOS each."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["image,mos"]
    for index in range(count):
        Image.fromarray(natural_image(index, size=(64, 64))).save(folder / f"p{index:02d}.png")
        lines.append(f"p{index:02d}.png,{index}")
    manifest = folder / "manifest.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def _job(*args: str) -> str:
    result = runner.invoke(app, ["eval", "submit", *args, "--tools", "PIQE"])
    assert result.exit_code == 0, result.output
    return result.stdout.split()[-1]


def _items(results: str, job_id: str) -> list[str]:
    with read_scope(make_engine(results)) as session:
        return sorted(session.scalars(select(JobItem.item_key).where(JobItem.job_id == job_id)))


def test_submit_sample_takes_the_seeds_rows_and_the_job_says_so(tmp_path, results):
    manifest = _photos(tmp_path / "photos", 12)
    first = _job(str(manifest), "--sample", "4", "--seed", "7")
    chosen = _items(results, first)
    assert len(chosen) == 4
    reordered = tmp_path / "photos" / "reversed.csv"  # the same rows, the other way round
    head, *body = manifest.read_text().splitlines()
    reordered.write_text("\n".join([head, *reversed(body)]) + "\n")
    assert _items(results, _job(str(reordered), "--sample", "4", "--seed", "7")) == chosen
    others = {
        tuple(_items(results, _job(str(manifest), "--sample", "4", "--seed", str(seed))))
        for seed in (8, 9)
    }
    assert tuple(chosen) not in others

    with read_scope(make_engine(results)) as session:
        stored = json.loads(session.get(Job, first).spec_json)
    assert (stored["sample"], stored["seed"], stored["offset"], stored["limit"]) == (4, 7, 0, None)
    assert lifecycle.job_spec(make_engine(results), first).subset == Subset(sample=4, seed=7)
    listed = runner.invoke(app, ["eval", "list", "--json"])
    assert {row["id"]: row["subset"] for row in json.loads(listed.stdout)}[
        first
    ] == "sample 4, seed 7"
    table = runner.invoke(app, ["eval", "list"], env={"COLUMNS": "300"}).stdout
    assert "manifest.csv (sample 4, seed 7)" in table
    report = runner.invoke(app, ["eval", "report", first[:8], "--bootstrap", "0"]).stdout
    assert "Rows:       sample 4, seed 7" in report
    resumed = runner.invoke(app, ["eval", "resume", first[:8]])
    assert resumed.exit_code == 0, resumed.output
    assert f"job {first[:8]} (manifest.csv, sample 4, seed 7) done" in " ".join(
        resumed.stderr.split()
    )


def test_submit_offset_skips_rows_and_a_seed_without_a_sample_is_refused(tmp_path, results):
    manifest = _photos(tmp_path / "photos", 8)
    job = _job(str(manifest), "--offset", "5", "--limit", "2")
    assert _items(results, job) == ["p05.png", "p06.png"]
    assert lifecycle.job_spec(make_engine(results), job).subset.describe() == "rows 6-7"
    unseeded = _job(str(manifest), "--sample", "3")
    assert lifecycle.job_spec(make_engine(results), unseeded).seed == 0  # stored, drawn again
    assert _items(results, unseeded) == _items(
        results, _job(str(manifest), "--sample", "3", "--seed", "0")
    )
    refused = runner.invoke(
        app, ["eval", "submit", str(manifest), "--tools", "PIQE", "--seed", "3"]
    )
    assert refused.exit_code == 2
    assert "--seed chooses the rows of --sample N: give --sample too" in " ".join(
        refused.output.split()
    )


def test_a_public_dataset_is_sampled_by_the_same_rule(tmp_path, results, livec_dir):
    koniq = koniq_root(livec_dir, tmp_path / "koniq", 8)
    job = _job("--dataset", "koniq", "--root", str(koniq), "--sample", "3", "--seed", "2")
    chosen = _items(results, job)
    with (koniq / "koniq10k_scores_and_distributions.csv").open() as handle:
        names = [row["image_name"] for row in csv.DictReader(handle)]
    rows = [
        (index + 2, {"id": name, "image": f"1024x768/{name}"}) for index, name in enumerate(names)
    ]
    assert chosen == sorted(row["id"] for _, row in Subset(sample=3, seed=2).apply(rows))
    again = _job("--dataset", "koniq", "--root", str(koniq), "--sample", "3", "--seed", "2")
    assert _items(results, again) == chosen
    estimate = runner.invoke(
        app,
        [
            "eval",
            "estimate",
            "--dataset",
            "koniq",
            "--root",
            str(koniq),
            "--tools",
            "PIQE",
            "--sample",
            "3",
            "--seed",
            "2",
            "--measure",
            "2",
            "--json",
        ],
    )
    assert estimate.exit_code == 0, estimate.output
    figures = json.loads(estimate.stdout)
    assert (figures["total_items"], figures["sample_items"]) == (3, 2)
    assert figures["subset"] == "sample 3, seed 2"


@pytest.mark.parametrize("command", ["submit", "estimate"])
@pytest.mark.parametrize(("flag", "value"), [("--offset", "-1"), ("--sample", "0")])
def test_a_subset_out_of_range_is_a_usage_error(tmp_path, results, command, flag, value):
    manifest = _photos(tmp_path / "photos", 2)
    result = runner.invoke(app, ["eval", command, str(manifest), "--tools", "PIQE", flag, value])
    assert result.exit_code == 2
    assert f"Invalid value for '{flag}'" in result.output
