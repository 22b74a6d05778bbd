"""Figures a paper can print.

- A metric's headline is its own score, as pyiqa gives it, sign-corrected (BRISQUE's -0.27 is
  reported as 0.27): the [1,5] score of the paper's logistic is not monotone for BRISQUE.
- A job of two tools is two rows in ``eval list``, ``eval compare`` and ``--group``.
- MCQ accuracy counts a failed item as a wrong answer.
- ``eval compare --format latex|markdown|csv`` writes a table for a paper.

The metric jobs run on 20 real LIVE-C photos of the test data (``livec-extra``:
two of them lie where BRISQUE's published mapping runs the wrong way), BRISQUE and NIQE with
its parameter files (``pyiqa-weights``); pyiqa itself scores PIQE (weight-free) and NIQE on
the same files for comparison.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply, openai_error
from tests.conformance.items import images, multiple_choice, write_manifest
from tests.conformance.simulated_model import Behaviour, SimulatedModel
from tests.conftest import livec_manifest, missing_data

# Left out of the README's test command (CI runs it): real tools on real photos, figures drawn.
pytestmark = pytest.mark.slow

runner = CliRunner()
PHOTOS = 20
GROUP = "paper_1"
#: Names from users reach LaTeX, Markdown and CSV: specials to escape, a formula to defuse.
JOB_NAME = "=1+2 & 50%_#{x}"
MANIFEST_NAME = "=photos & 5%_#.csv"


@dataclass
class PaperJobs:
    """The module's results database: a BRISQUE+NIQE job (None without the parameter files),
    a PIQE job, on the same photos; their exported rows."""

    url: str
    manifest: Path
    weights: Path | None
    both: str | None
    piqe: str
    rows: dict[str, list[dict[str, str]]]


def _ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def _exported(job: str) -> list[dict[str, str]]:
    return list(
        csv.DictReader(
            io.StringIO(
                _ok(runner.invoke(app, ["eval", "export", job, "--format", "csv", "-o", "-"]))
            )
        )
    )


@pytest.fixture(scope="module")
def paper_jobs(
    data_dir: Path, livec_extra_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PaperJobs]:
    """One database for the module's tests (the jobs take most of their time), set up as
    the ``results`` fixture sets up its own."""
    folder = tmp_path_factory.mktemp("paper")
    manifest = livec_manifest(livec_extra_dir, folder / MANIFEST_NAME, PHOTOS)
    weights = data_dir / "pyiqa-weights"
    has_weights = all(
        (weights / name).is_file()
        for name in ("niqe_modelparameters.mat", "brisque_svm_weights.pth")
    )
    url = f"sqlite:///{folder / 'results.sqlite3'}"
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (
            ("DATABASE_URL", url),
            ("TOOL_CACHE", "memory"),
            ("DEVICE", "cpu"),
            ("VLM_CACHE", "false"),
        ):
            patch.setenv(f"AGENTIC_IQA_{name}", value)
        for name in ("BROKER_URL", "VLM_BACKEND", "VLM_MODEL", "VLM_BASE_URL", "WEIGHTS_DIR"):
            patch.delenv(f"AGENTIC_IQA_{name}", raising=False)
        both = None
        if has_weights:
            patch.setenv("AGENTIC_IQA_WEIGHTS_DIR", str(weights))
            (both,) = _ok(
                runner.invoke(
                    app,
                    [
                        "eval",
                        "submit",
                        str(manifest),
                        "--mode",
                        "tools",
                        "--tools",
                        "BRISQUE,NIQE",
                        "--group",
                        GROUP,
                        "--name",
                        JOB_NAME,
                    ],
                )
            ).split()
        (piqe,) = _ok(
            runner.invoke(
                app,
                [
                    "eval",
                    "submit",
                    str(manifest),
                    "--tools",
                    "PIQE",
                    "--group",
                    GROUP,
                    "--name",
                    "piqe",
                ],
            )
        ).split()
        rows = {job: _exported(job) for job in (both, piqe) if job}
        yield PaperJobs(url, manifest, weights if has_weights else None, both, piqe, rows)


def _needs_brisque_and_niqe(jobs: PaperJobs) -> str:
    if jobs.both is None:
        missing_data("pyiqa-weights (NIQE's and BRISQUE's parameter files)")
    return jobs.both


def _column(rows: list[dict[str, str]], name: str) -> np.ndarray:
    return np.array([float(row[name]) for row in rows])


def _report(job: str) -> dict:
    return json.loads(
        _ok(runner.invoke(app, ["eval", "report", job, "--json", "--bootstrap", "0"]))
    )


def _pyiqa_scores(metric: str, paths: list[str], **options: str) -> np.ndarray:
    """pyiqa's own scores, straight from ``pyiqa.create_metric`` (float64 input: the
    precision the project runs these tools in)."""
    import pyiqa
    import torch

    model = pyiqa.create_metric(metric, device="cpu", **options)
    scores = []
    for path in paths:
        pixels = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64) / 255.0
        with torch.no_grad():
            scores.append(float(model(torch.from_numpy(pixels).permute(2, 0, 1)[None])))
    return np.array(scores)


# -- a metric's own score ------------------------------------------------------------------------


def test_piqes_headline_is_pyiqas_spearman_sign_corrected(paper_jobs: PaperJobs) -> None:
    rows = paper_jobs.rows[paper_jobs.piqe]
    mos = _column(rows, "mos")
    own = _pyiqa_scores("piqe", [row["image"] for row in rows])
    # The raw column is pyiqa's score (PIQE's block decisions move a few photos by up to 0.6 %
    # between pyiqa's arithmetic and the project's), in the same order.
    assert np.allclose(_column(rows, "raw:PIQE"), own, rtol=1e-2)
    (tool,) = _report(paper_jobs.piqe)["tools"]
    assert tool["srcc"] == pytest.approx(-stats.spearmanr(own, mos).statistic, abs=1e-12)
    assert tool["plcc"] == pytest.approx(-stats.pearsonr(own, mos).statistic, abs=2e-3)
    assert tool["lower_is_better"] is True and tool["basis"] == "raw"
    assert tool["srcc_raw"] == pytest.approx(stats.spearmanr(own, mos).statistic, abs=1e-12)


def test_brisque_and_niqe_are_reported_on_their_own_scores_not_the_bent_mapping(
    paper_jobs: PaperJobs,
) -> None:
    job = _needs_brisque_and_niqe(paper_jobs)
    rows = paper_jobs.rows[job]
    mos = _column(rows, "mos")
    assert paper_jobs.weights is not None
    niqe = _pyiqa_scores(
        "niqe",
        [row["image"] for row in rows[:3]],
        pretrained_model_path=str(paper_jobs.weights / "niqe_modelparameters.mat"),
    )
    assert np.allclose(_column(rows[:3], "raw:NIQE"), niqe, atol=1e-2)
    report = _report(job)
    tools = {tool["tool"]: tool for tool in report["tools"]}
    for name in ("BRISQUE", "NIQE"):
        raw, normalized = _column(rows, f"raw:{name}"), _column(rows, f"tool:{name}")
        tool = tools[name]
        assert tool["srcc"] == pytest.approx(-stats.spearmanr(raw, mos).statistic, abs=1e-12)
        assert tool["plcc"] == pytest.approx(-stats.pearsonr(raw, mos).statistic, abs=1e-12)
        assert tool["krcc"] == pytest.approx(-stats.kendalltau(raw, mos).statistic, abs=1e-12)
        assert (tool["lower_is_better"], tool["direction"], tool["n"]) == (
            True,
            "lower is better",
            PHOTOS,
        )
        assert tool["normalized"]["srcc"] == pytest.approx(
            stats.spearmanr(normalized, mos).statistic, abs=1e-12
        )
    brisque = tools["BRISQUE"]
    # Two photos lie below raw 5.6, where the paper's mapping rises again: the [1,5] ranks are
    # not BRISQUE's, and the report says so beside the [1,5] figure.
    assert abs(brisque["srcc"] - brisque["normalized"]["srcc"]) > 0.01
    assert brisque["mapping"]["monotone"] is False and brisque["mapping"]["items"] >= 1
    low = min(_column(rows, "raw:BRISQUE"))
    assert brisque["mapping"]["raw_range"][0] == pytest.approx(low) and low < 5.6
    assert tools["NIQE"]["mapping"]["monotone"] is True
    assert "sign-corrected" in report["convention"]
    text = _ok(runner.invoke(app, ["eval", "report", job, "--bootstrap", "0"]))
    brisque_line = next(line for line in text.splitlines() if line.strip().startswith("BRISQUE"))
    assert f"{brisque['srcc']:.3f}" in brisque_line and "lower" in brisque_line
    assert f"{brisque['normalized']['srcc']:.3f}!" in brisque_line
    assert "BRISQUE's [1,5] mapping" in text and "not decreasing" in text


def test_a_mapping_is_flagged_only_where_the_jobs_raw_scores_reach_its_wrong_way_span() -> None:
    from agentic_iqa.reports.own_scores import mapping_check, tool_facts

    facts = tool_facts(["BRISQUE", "niqe", "no-such-tool"])
    assert facts["BRISQUE"].lower_is_better and facts["niqe"].lower_is_better
    assert facts["no-such-tool"].lower_is_better is None
    bent = mapping_check("BRISQUE", facts["BRISQUE"], [2.0, 20.0, 60.0])
    assert bent["monotone"] is False and bent["items"] == 1 and "2" in bent["warning"]
    assert bent["wrong_way"][0][0] == 2.0 and 5.0 < bent["wrong_way"][0][1] < 6.0
    fine = mapping_check("BRISQUE", facts["BRISQUE"], [10.0, 20.0, 60.0])
    assert (fine["monotone"], fine["warning"], fine["items"]) == (True, None, 0)
    assert mapping_check("x", facts["no-such-tool"], [1.0, 2.0])["monotone"] is None


# -- one row per (job, tool) ---------------------------------------------------------------------


def test_a_two_tool_job_is_one_row_per_tool_in_list_compare_and_group(
    paper_jobs: PaperJobs, tmp_path: Path
) -> None:
    job = _needs_brisque_and_niqe(paper_jobs)
    srcc = {tool["tool"]: tool["srcc"] for tool in _report(job)["tools"]}
    srcc["PIQE"] = _report(paper_jobs.piqe)["tools"][0]["srcc"]

    listed = json.loads(_ok(runner.invoke(app, ["eval", "list", "--json"])))
    ours = [row for row in listed if row["id"] == job]
    assert [row["model"] for row in ours] == ["tools/BRISQUE", "tools/NIQE"]
    assert [row["tool"] for row in ours] == ["BRISQUE", "NIQE"]
    for row in listed:
        assert row["figure"]["srcc"] == pytest.approx(srcc[row["tool"]])
        assert row["figure"]["lower_is_better"] is True
    only = json.loads(_ok(runner.invoke(app, ["eval", "list", "--json", "--model", "tools/NIQE"])))
    assert [(row["id"], row["tool"]) for row in only] == [(job, "NIQE")]
    text = _ok(runner.invoke(app, ["eval", "list"])).splitlines()
    lines = [line for line in text if line.startswith(job[:8])]
    assert len(lines) == 2
    for line, tool in zip(lines, ("BRISQUE", "NIQE"), strict=True):
        assert f"tools/{tool} " in line and f"SRCC {srcc[tool]:.3f}" in line

    group = json.loads(_ok(runner.invoke(app, ["eval", "compare", "--group", GROUP, "--json"])))
    assert group["rows"] == ["tools/BRISQUE", "tools/NIQE", "tools/PIQE"]
    (column,) = group["columns"]
    for row, tool in zip(group["rows"], ("BRISQUE", "NIQE", "PIQE"), strict=True):
        cell = group["cells"][row][column]
        assert cell["tool"] == tool and cell["srcc"] == pytest.approx(srcc[tool])
    assert group["cells"]["tools/BRISQUE"][column]["mapping_monotone"] is False
    table = _ok(runner.invoke(app, ["eval", "compare", "--group", GROUP])).splitlines()
    assert table[0] == f"group {GROUP}: 2 jobs"
    for tool in ("BRISQUE", "NIQE", "PIQE"):
        (line,) = [line for line in table if line.startswith(f"tools/{tool} ")]
        assert f"SRCC {srcc[tool]:.3f}" in line
    page = tmp_path / "group.html"
    _ok(runner.invoke(app, ["eval", "compare", "--group", GROUP, "--html", str(page)]))
    html = page.read_text()
    assert all(f"tools/{tool}" in html for tool in ("BRISQUE", "NIQE", "PIQE"))

    compared = json.loads(
        _ok(
            runner.invoke(
                app, ["eval", "compare", job, paper_jobs.piqe, "--json", "--bootstrap", "50"]
            )
        )
    )
    assert [line["label"] for line in compared["lines"]] == [
        f"{job[:8]} tools/BRISQUE",
        f"{job[:8]} tools/NIQE",
        f"{paper_jobs.piqe[:8]} tools/PIQE",
    ]
    by_tool = {line["tool"]: line for line in compared["lines"]}
    for tool, line in by_tool.items():
        assert line["mos"]["srcc"] == pytest.approx(srcc[tool])
    assert by_tool["NIQE"]["difference"]["srcc"] == pytest.approx(srcc["NIQE"] - srcc["BRISQUE"])
    assert by_tool["BRISQUE"]["mapping"]["monotone"] is False
    page = tmp_path / "compare.html"
    _ok(
        runner.invoke(
            app, ["eval", "compare", job, paper_jobs.piqe, "--bootstrap", "0", "--html", str(page)]
        )
    )
    assert "SRCC [1,5]" in page.read_text() and "BRISQUE&#x27;s [1,5] mapping" in page.read_text()


# -- tables for a paper --------------------------------------------------------------------------


def _latex_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """The header row's cells and the body rows' cells of a tabular (split at unescaped &)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Method &"))
    end = next(i for i in range(start + 2, len(lines)) if lines[i] == r"\hline")
    split = [
        re.split(r"(?<!\\)&", line.removesuffix(r" \\"))
        for line in lines[start:end]
        if line != r"\hline"
    ]
    return [cell.strip() for cell in split[0]], [
        [cell.strip() for cell in row] for row in split[1:]
    ]


def _value(cell: str, bold: str) -> tuple[float, bool]:
    """A cell's value, and whether it is in bold (``bold`` the markup's pattern)."""
    match = re.match(bold, cell)
    if match:
        return float(match.group(1)), True
    return float(re.match(r"(-?\d\.\d{3})", cell).group(1)), False


def _best_in_bold(header: list[str], rows: list[list[str]], bold: str) -> None:
    """In every metric column the bold cells are exactly those of the highest value."""
    for index, name in enumerate(header):
        if not re.search(r"SRCC|PLCC|KRCC", name):
            continue
        cells = [_value(row[index], bold) for row in rows]
        top = max(value for value, _ in cells)
        assert [marked for _, marked in cells] == [value == top for value, _ in cells], name


def test_compare_writes_latex_markdown_and_csv_tables_with_the_best_in_bold(
    paper_jobs: PaperJobs, tmp_path: Path
) -> None:
    job = _needs_brisque_and_niqe(paper_jobs)
    pair = [job, paper_jobs.piqe, "--bootstrap", "50"]
    document = json.loads(_ok(runner.invoke(app, ["eval", "compare", *pair, "--json"])))
    expected = [[line["mos"][m] for m in ("srcc", "plcc", "krcc")] for line in document["lines"]]

    latex_file = tmp_path / "table.tex"
    result = runner.invoke(
        app, ["eval", "compare", *pair, "--format", "latex", "-o", str(latex_file)]
    )
    assert result.exit_code == 0, result.output
    latex = latex_file.read_text()
    assert latex.count(r"\begin{tabular}") == 1 and latex.rstrip().endswith(r"\end{table}")
    caption = re.search(r"\\caption\{(.*)\}", latex).group(1)
    assert "n = 20" in caption and "sign-corrected" in caption
    assert "BRISQUE, NIQE" in caption and "lower is better" in caption
    assert "percentile bootstrap over 50 resamples" in caption
    header, rows = _latex_rows(latex)
    assert header == ["Method", "$n$", "SRCC", "PLCC", "KRCC"]
    assert all(len(row) == len(header) for row in rows) and len(rows) == 3
    assert rows[0][0] == r"=1+2 \& 50\%\_\#\{x\}: BRISQUE"
    assert [row[1] for row in rows] == ["20"] * 3
    for row, values in zip(rows, expected, strict=True):
        shown = [_value(cell, r"\\textbf\{(-?\d\.\d{3})\}")[0] for cell in row[2:]]
        assert shown == [round(value, 3) for value in values]
        assert all(r"{\scriptsize [" in cell for cell in row[2:])
    _best_in_bold(header, rows, r"\\textbf\{(-?\d\.\d{3})\}")

    markdown = _ok(runner.invoke(app, ["eval", "compare", *pair, "--format", "markdown"]))
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in table]
    assert cells[0] == ["Method", "n", "SRCC [CI]", "PLCC [CI]", "KRCC [CI]"]
    assert set(table[1]) <= set("|:-")
    assert cells[2][0] == r"=1+2 \& 50%\_\#\{x\}: BRISQUE"
    _best_in_bold(cells[0], cells[2:], r"\*\*(-?\d\.\d{3})\*\*")
    assert next(line for line in markdown.splitlines() if line.startswith("Table: "))

    spreadsheet = _ok(runner.invoke(app, ["eval", "compare", *pair, "--format", "csv"]))
    caption_line, *body = spreadsheet.splitlines()
    assert caption_line.startswith("# ") and "sign-corrected" in caption_line
    records = list(csv.DictReader(body))
    assert records[0]["method"] == "'" + JOB_NAME + ": BRISQUE"  # never a formula
    for record, values in zip(records, expected, strict=True):
        assert [float(record[m]) for m in ("srcc", "plcc", "krcc")] == pytest.approx(values)
        assert float(record["srcc_low"]) <= float(record["srcc"]) <= float(record["srcc_high"])
    for metric in ("srcc", "plcc", "krcc"):
        top = max(round(float(record[metric]), 3) for record in records)
        assert [metric in record["best"].split(";") for record in records] == [
            round(float(record[metric]), 3) == top for record in records
        ]

    grouped = _ok(
        runner.invoke(
            app, ["eval", "compare", "--group", GROUP, "--format", "latex", "--bootstrap", "20"]
        )
    )
    header, rows = _latex_rows(grouped)
    assert r"\multicolumn{4}{c}{=photos \& 5\%\_\#.csv}" in grouped
    assert [row[0] for row in rows] == ["tools/BRISQUE", "tools/NIQE", "tools/PIQE"]
    _best_in_bold(header, rows, r"\\textbf\{(-?\d\.\d{3})\}")
    group_csv = _ok(
        runner.invoke(
            app, ["eval", "compare", "--group", GROUP, "--format", "csv", "--bootstrap", "0"]
        )
    )
    records = list(csv.DictReader(group_csv.splitlines()[1:]))
    assert {record["dataset"] for record in records} == {"'" + MANIFEST_NAME}
    refused = runner.invoke(app, ["eval", "compare", *pair, "-o", str(tmp_path / "x.tex")])
    assert refused.exit_code == 2 and "--format" in refused.output


# -- accuracy over every question ----------------------------------------------------------------


def test_mcq_accuracy_counts_failed_items_as_wrong(results, tmp_path, monkeypatch) -> None:
    """Six questions, the simulated provider refuses three of them (HTTP 422 on their
    summary): the job's items half fail, and the three answered are right.  Accuracy is 3/6,
    answered-only 3/3, in the report, the list and the comparison with a clean job."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-key")
    items = multiple_choice(images(tmp_path / "images", 6), 6, seed=0)
    # The question's stem: the request letters the options on lines of their own.
    failing = {items[i].truth.query.split(" A. ")[0] for i in (1, 3, 4)}
    model = SimulatedModel(Behaviour.CLEAN)
    for item in items:
        model.learn(item.image, item.truth)

    def refusing(request):
        if any(query in json.dumps(request.body) for query in failing):
            return Reply(
                422, openai_error("the image could not be processed", "invalid_request_error")
            )
        return model(request)

    manifest = write_manifest(items, tmp_path / "questions.csv")
    ids = []
    for handler in (refusing, model):
        with FakeAPIServer(handler) as server:
            ids += _ok(
                runner.invoke(
                    app,
                    [
                        "eval",
                        "submit",
                        str(manifest),
                        "--mode",
                        "vlm",
                        "--backend",
                        "openai",
                        "--model",
                        "gpt-4o",
                        "--base-url",
                        f"{server.url}/v1",
                    ],
                )
            ).split()
    half, clean = ids
    mcq = _report(half)["mcq"]
    assert mcq["accuracy"] == 0.5 and (mcq["n"], mcq["correct"]) == (6, 3)
    assert (mcq["failed"], mcq["answered"], mcq["answered_accuracy"]) == (3, 3, 1.0)
    text = _ok(runner.invoke(app, ["eval", "report", half, "--bootstrap", "0"]))
    assert "MCQ accuracy: 0.500" in text and "3 failed, counted wrong" in text
    page = tmp_path / "report.html"
    _ok(runner.invoke(app, ["eval", "report", half, "--bootstrap", "0", "--html", str(page)]))
    assert re.search(r'<table id="mcq">.*?<td>0\.500</td>', page.read_text(), re.S)

    listed = {
        row["id"]: row["figure"]
        for row in json.loads(_ok(runner.invoke(app, ["eval", "list", "--json"])))
    }
    assert (listed[half]["accuracy"], listed[half]["failed"]) == (0.5, 3)
    assert listed[clean]["accuracy"] == 1.0
    line = next(
        line
        for line in _ok(runner.invoke(app, ["eval", "list"])).splitlines()
        if line.startswith(half[:8])
    )
    assert "acc 0.500 (3/6; 3 failed or unanswered" in line

    compared = json.loads(
        _ok(runner.invoke(app, ["eval", "compare", half, clean, "--json", "--bootstrap", "200"]))
    )
    first, second = compared["lines"]
    assert (first["mcq"]["accuracy"], first["mcq"]["failed"], second["mcq"]["accuracy"]) == (
        0.5,
        3,
        1.0,
    )
    assert second["mcq_difference"]["n"] == 6
    assert second["mcq_difference"]["accuracy"] == pytest.approx(0.5)


def test_accuracy_is_right_answers_over_every_question_run_whatever_the_mix() -> None:
    """The rule on many generated jobs: right / (answered + without an answer + failed),
    answered-only right / answered, per type the same; queued items are not counted."""
    from agentic_iqa.reports.compare import build_comparison
    from agentic_iqa.reports.report import build_report

    rng = np.random.default_rng(40)
    for _ in range(30):
        rows, right, answered, run = [], 0, 0, 0
        kinds = {"what": [0, 0], "how": [0, 0]}
        for index in range(int(rng.integers(1, 25))):
            truth = str(rng.choice(list("ABCD")))
            kind = str(rng.choice(list(kinds)))
            outcome = str(rng.choice(["right", "wrong", "none", "failed", "queued"]))
            answer = {"right": truth, "wrong": "E", "none": "Unable to determine"}.get(outcome)
            status = outcome if outcome in ("failed", "queued") else "done"
            rows.append(
                {
                    "item_id": f"q{index}",
                    "image": f"/x/{index}.png",
                    "status": status,
                    "final_answer": answer,
                    "answer_truth": truth,
                    "mos": None,
                    "question_type": kind,
                    "quality_score": None,
                }
            )
            run += outcome != "queued"
            right += outcome == "right"
            answered += outcome in ("right", "wrong")
            kinds[kind][0] += outcome == "right"
            kinds[kind][1] += outcome != "queued"
        mcq = build_report(rows, bootstrap=0)["mcq"]
        assert mcq["n"] == run and mcq["correct"] == right and mcq["answered"] == answered
        assert mcq["accuracy"] == (right / run if run else None)
        assert mcq["answered_accuracy"] == (right / answered if answered else None)
        for entry in mcq["by_type"]:
            correct, total = kinds[entry["type"]]
            assert (entry["correct"], entry["n"]) == (correct, total)
        about = {"id": "a", "name": "a", "status": "done", "mode": "vlm", "tools": None}
        line = build_comparison([(about, rows), ({**about, "id": "b"}, rows)], bootstrap=0)[
            "lines"
        ][0]
        if run:
            assert line["mcq"]["accuracy"] == pytest.approx(right / run)
            assert line["mcq"]["n"] == run and not math.isnan(line["mcq"]["accuracy"])


def test_questions_on_bad_manifest_rows_count_in_accuracy_as_unanswered(
    results, tmp_path, monkeypatch
) -> None:
    """Six questions with known answers; three rows cannot be asked: a missing image (its
    cells all read), a MOS that is not a number and an id already taken (cells at fault).
    Their truth is kept, so accuracy is the three right answers over all six, not 3/3. A
    fourth bad row whose answer cell is itself unreadable has no truth to count."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-key")
    items = multiple_choice(images(tmp_path / "images", 7), 7, seed=0)
    model = SimulatedModel(Behaviour.CLEAN)
    for item in items:
        model.learn(item.image, item.truth)
    manifest = write_manifest(items, tmp_path / "questions.csv")
    rows = list(csv.reader(manifest.open()))
    rows[2][1] = str(tmp_path / "images" / "gone.png")  # line 3: no such image
    rows[3][4] = "lots"  # line 4: MOS not a number
    rows[4][0] = rows[1][0]  # line 5: the id of line 2
    rows[5][3] = "Z"  # line 6: no such letter
    with manifest.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)

    with FakeAPIServer(model) as server:
        job = _ok(
            runner.invoke(
                app,
                [
                    "eval",
                    "submit",
                    str(manifest),
                    "--mode",
                    "vlm",
                    "--backend",
                    "openai",
                    "--model",
                    "gpt-4o",
                    "--base-url",
                    f"{server.url}/v1",
                ],
            )
        ).split()[0]
    mcq = _report(job)["mcq"]
    assert (mcq["n"], mcq["correct"], mcq["failed"]) == (6, 3, 3)
    assert mcq["accuracy"] == 0.5 and mcq["answered_accuracy"] == 1.0
    exported = {row["line"]: row for row in _exported(job)}
    for line in ("3", "4", "5"):
        assert exported[line]["status"] == "failed"
        assert exported[line]["answer_truth"] == rows[int(line) - 1][3]
        assert exported[line]["query"] == rows[int(line) - 1][2]
    assert (exported["6"]["status"], exported["6"]["answer_truth"]) == ("failed", "")
    assert "answer 'Z' on line 6 is not a letter" in exported["6"]["error"]
