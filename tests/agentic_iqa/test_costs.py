"""VLM usage, cost and the response cache end to end: jobs and `assess` with the openai
backend (the real SDK) against a local server speaking its protocol."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from agentic_iqa.agents.team import default_agents
from agentic_iqa.cli import app
from agentic_iqa.db import dispose_engines, make_engine, upgrade
from agentic_iqa.db import jobs as store
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.exports import vlm_summary
from agentic_iqa.db.models import VlmCall
from agentic_iqa.db.vlm_calls import vlm_steps, vlm_usage
from agentic_iqa.fitting.degradations import degrade
from agentic_iqa.jobs.estimate import batch_pricing, describe_batch, extrapolate
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.lifecycle import cancel
from agentic_iqa.runtime.local import run_local
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit
from agentic_iqa.vlm.usage import ModelUsage, Price, PriceTable, summarize
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply, openai_completion
from tests.conftest import REPO, natural_image

PLAN = {
    "query_type": "IQA",
    "query_scope": "Global",
    "distortion_source": "Inferred",
    "distortions": None,
    "reference_mode": "No-Reference",
    "required_tool": "PIQE",
    "plan": {
        "distortion_detection": False,
        "distortion_analysis": False,
        "tool_selection": False,
        "tool_execution": True,
    },
}
#: The plan's tool is run because the query names it (a plan's own tool would be dropped).
QUERY = "Rate the quality of this image with PIQE."
LEVELS = [("B", -0.4), ("A", -2.0), ("C", -1.5), ("D", -3.0), ("E", -5.0)]
#: What the server reports for every call: 1000 prompt tokens of which 400 cached, 50 out.
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 50,
    "total_tokens": 1050,
    "prompt_tokens_details": {"cached_tokens": 400},
}
GPT_4O = Price(input=2.50, output=10.00, cached_input=1.25)  # configs/prices.yaml
CALL_COST = (600 * 2.50 + 400 * 1.25 + 50 * 10.00) / 1_000_000

runner = CliRunner()


def answer(request: Recorded) -> Reply:
    """Planner: a plan that runs PIQE; summarizer: a level letter with log-probabilities,
    or a JSON answer."""
    system = next((m["content"] for m in request.body["messages"] if m["role"] == "system"), "")
    model = request.body["model"]
    if "planner" in system:
        return Reply(200, openai_completion(json.dumps(PLAN), model=model, usage=USAGE))
    if request.body.get("logprobs"):
        return Reply(200, openai_completion("B", model=model, top_logprobs=LEVELS, usage=USAGE))
    body = {"final_answer": "Good", "quality_reasoning": "sharp and clean", "need_replan": False}
    return Reply(200, openai_completion(json.dumps(body), model=model, usage=USAGE))


@dataclass
class Remote:
    server: FakeAPIServer
    cache_url: str


@pytest.fixture
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Remote]:
    """Every role on the openai backend at the fake server; the response cache in a SQLite
    file of this test; tool scores in memory."""
    cache_url = f"sqlite:///{tmp_path / 'cache' / 'scores.sqlite3'}"
    with FakeAPIServer(answer) as server:
        # A price applies at a provider's own endpoint, or where the table names the host.
        prices = tmp_path / "prices.yaml"
        host = server.url.removeprefix("http://")
        prices.write_text(
            f'endpoints:\n  "{host}":\n    gpt-4o: {{input: 2.50, output: 10.00,'
            " cached_input: 1.25}\n",
            encoding="utf-8",
        )
        for name, value in {
            "VLM_BACKEND": "openai",
            "VLM_MODEL": "gpt-4o",
            "VLM_BASE_URL": f"{server.url}/v1",
            "TOOL_CACHE": cache_url,
            "DEVICE": "cpu",
            "VLM_CACHE": "true",
            "PRICES_FILE": str(prices),
        }.items():
            monkeypatch.setenv(f"AGENTIC_IQA_{name}", value)
        monkeypatch.setenv("AGENTIC_IQA_PLANNER_MAX_RETRIES", "0")
        yield Remote(server, cache_url)


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    """Three images (the example photo and two degraded copies) with MOS."""
    folder = tmp_path / "images"
    folder.mkdir()
    original = Image.open(REPO / "examples" / "i03_reference.png").convert("RGB")
    rows = []
    for index, (kind, level) in enumerate((("blur", 1), ("noise", 2), ("jpeg", 3))):
        degrade(original, kind, level).save(folder / f"{kind}.png")
        rows.append({"image": f"images/{kind}.png", "mos": 4.0 - index, "query": QUERY})
    path = tmp_path / "manifest.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def database(folder: Path, name: str) -> str:
    url = f"sqlite:///{folder / name}"
    upgrade(url)
    return url


def run_job(url: str, manifest: Path) -> str:
    engine = make_engine(url)
    job_id = submit(engine, JobSpec.build(manifest=manifest, query=QUERY))
    run_local(engine, job_id, default_agents(), workers=2)
    return job_id


def test_a_finished_job_rerun_on_a_fresh_database_makes_no_vlm_call(
    remote: Remote, manifest: Path, tmp_path: Path
) -> None:
    first_url = database(tmp_path, "first.sqlite3")
    first_job = run_job(first_url, manifest)
    calls = len(remote.server.requests)
    assert calls == 3 * 2  # per item: one plan, one five-level answer

    second_url = database(tmp_path, "second.sqlite3")
    second_job = run_job(second_url, manifest)
    assert len(remote.server.requests) == calls  # not one more request

    with session_scope(make_engine(first_url)) as session:
        first = vlm_summary(session, first_job)
        per_run = [
            vlm_usage(session, run_id=run.run_id)
            for run in session.query(store.JobItem).filter_by(job_id=first_job)
        ]
    with session_scope(make_engine(second_url)) as session:
        second = vlm_summary(session, second_job)
        rows = session.query(VlmCall).all()
        items = session.query(store.JobItem).filter_by(job_id=second_job).all()
        steps = [vlm_steps(session, item.run_id) for item in items]
        answers = [item.status for item in items]
    assert answers == ["done"] * 3
    assert first["calls"] == 6 and first["cache_hits"] == 0
    assert (first["input_tokens"], first["cached_tokens"], first["output_tokens"]) == (
        6000,
        2400,
        300,
    )
    assert first["cost_usd"] == pytest.approx(6 * CALL_COST)
    assert first["cost_per_item_usd"] == pytest.approx(2 * CALL_COST)
    assert first["models"] == ["gpt-4o"]
    for usage in per_run:  # each run: its plan and its answer
        ((model_usage),) = usage
        assert (model_usage.calls, model_usage.input_tokens) == (2, 2000)
    # The re-run: every answer from the cache, stored as hits, costing nothing.
    assert len(rows) == 6 and all(row.cache_hit for row in rows)
    assert {(row.role, row.task) for row in rows} == {
        ("planner", "plan"),
        ("summarizer", "quality_levels"),
    }
    assert second["calls"] == 0 and second["cache_hits"] == 6
    assert second["cost_usd"] == 0.0 and second["input_tokens"] == 0
    for by_step in steps:
        assert by_step == {("plan", 0): (0, 1), ("summarize", 0): (0, 1)}
    for url in (first_url, second_url):
        dispose_engines(url)


def test_a_cancel_from_another_process_stops_the_calls_of_the_runs_claimed_ahead(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`eval cancel` elsewhere while a job runs here: the runs this process claimed ahead
    (their first step begun from the claim) end as cancelled without asking the model; only
    calls begun before the runner read the cancel are made.  Each call takes 0.5 s, the
    runner reads the job every 0.5 s: at most two calls after the cancel, where the eight
    runs of a claim window would make seven more plan calls."""
    arrived: list[float] = []

    def slow(request: Recorded) -> Reply:
        arrived.append(time.monotonic())
        time.sleep(0.5)
        return answer(request)

    folder = tmp_path / "photos"
    folder.mkdir()
    for index in range(12):  # distinct photos: no answer comes from the response cache
        Image.fromarray(natural_image(index, size=(128, 96))).save(folder / f"{index}.png")
    url = database(tmp_path, "results.sqlite3")
    engine = make_engine(url)
    with FakeAPIServer(slow) as server:
        monkeypatch.setenv("AGENTIC_IQA_VLM_BASE_URL", f"{server.url}/v1")
        job_id = submit(engine, JobSpec.build(manifest=folder, query=QUERY))
        runner_thread = threading.Thread(
            target=run_local,
            args=(engine, job_id, default_agents()),
            kwargs={"workers": 1},
        )
        runner_thread.start()
        deadline = time.monotonic() + 60
        while len(arrived) < 3 and time.monotonic() < deadline:  # the second run's plan
            time.sleep(0.02)
        cancelled_at = time.monotonic()
        cancel(make_engine(url), job_id)  # nothing of this process's is told
        runner_thread.join(timeout=60)
    assert not runner_thread.is_alive()
    after = [moment for moment in arrived if moment > cancelled_at]
    assert len(after) <= 2, (len(arrived), [round(t - cancelled_at, 2) for t in after])
    counts = progress(engine, job_id).counts
    assert counts.get("done", 0) <= 2 and sum(counts.values()) == 12, counts


def test_no_vlm_cache_on_eval_submit_asks_the_model_again(
    remote: Remote, manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_url = database(tmp_path, "first.sqlite3")
    run_job(first_url, manifest)
    before = len(remote.server.requests)
    second_url = database(tmp_path, "second.sqlite3")
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", second_url)
    result = runner.invoke(
        app, ["eval", "submit", str(manifest), "--no-vlm-cache", "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    assert len(remote.server.requests) == before + 6
    job_id = result.stdout.strip().splitlines()[-1]
    with session_scope(make_engine(second_url)) as session:
        assert store.get_job(session, job_id).vlm_cache is False
        assert vlm_summary(session, job_id)["calls"] == 6
    for url in (first_url, second_url):
        dispose_engines(url)


def test_eval_status_and_report_show_calls_tokens_and_cost(
    remote: Remote, manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = database(tmp_path, "results.sqlite3")
    job_id = run_job(url, manifest)
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)

    status = json.loads(runner.invoke(app, ["eval", "status", job_id, "--json"]).stdout)
    assert status["vlm"]["calls"] == 6
    assert status["vlm"]["cost_usd"] == pytest.approx(6 * CALL_COST)
    assert status["vlm"]["cost_per_item_usd"] == pytest.approx(2 * CALL_COST)
    text = runner.invoke(app, ["eval", "status", job_id], env={"COLUMNS": "250"}).stdout
    assert (
        f"VLM: 6 VLM calls, 0 cache hits, 6000 input tokens (2400 cached), 300 output "
        f"tokens, cost ${6 * CALL_COST:.4f}, ${2 * CALL_COST:.4f} per item"
    ) in text

    report = json.loads(
        runner.invoke(app, ["eval", "report", job_id, "--json", "--bootstrap", "0"]).stdout
    )
    assert report["vlm"]["calls"] == 6 and report["vlm"]["items"] == 3
    page = tmp_path / "report.html"
    result = runner.invoke(
        app,
        ["eval", "report", job_id, "--html", str(page), "--bootstrap", "0"],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output
    assert "VLM: 6 VLM calls" in result.stdout
    html = page.read_text(encoding="utf-8")
    assert '<table id="vlm">' in html and f"${6 * CALL_COST:.4f}" in html
    dispose_engines(url)


def test_a_model_without_a_price_has_an_unknown_cost(
    remote: Remote, manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_VLM_MODEL", "mystery-vl-7b")
    url = database(tmp_path, "results.sqlite3")
    job_id = run_job(url, manifest)
    with session_scope(make_engine(url)) as session:
        summary = vlm_summary(session, job_id)
    assert summary["calls"] == 6 and summary["input_tokens"] == 6000
    assert summary["cost_usd"] is None and summary["cost_per_item_usd"] is None
    host = remote.server.url.removeprefix("http://")
    assert summary["unpriced_models"] == [f"mystery-vl-7b at {host}"]
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
    text = runner.invoke(app, ["eval", "status", job_id], env={"COLUMNS": "250"}).stdout
    assert f"cost unknown (no price for mystery-vl-7b at {host})" in text
    dispose_engines(url)


def test_a_vendor_model_name_on_a_local_server_is_not_priced_as_the_vendors(
    remote: Remote, manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "gpt-4o" served at a base URL the price table does not name: tokens, cost unknown."""
    monkeypatch.setenv("AGENTIC_IQA_PRICES_FILE", str(REPO / "configs" / "prices.yaml"))
    url = database(tmp_path, "results.sqlite3")
    job_id = run_job(url, manifest)
    with session_scope(make_engine(url)) as session:
        summary = vlm_summary(session, job_id)
    assert summary["calls"] == 6 and summary["input_tokens"] == 6000
    assert summary["cost_usd"] is None
    assert summary["unpriced_models"] == [f"gpt-4o at {remote.server.url[7:]}"]
    dispose_engines(url)


def test_assess_shows_cached_steps_and_the_runs_cost(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    image = str(REPO / "examples" / "i03_blurred.png")
    first = runner.invoke(app, ["assess", image, "-q", QUERY, "--json"])
    assert first.exit_code == 0, first.output
    usage = json.loads(first.stdout)["vlm_usage"]
    assert (usage["calls"], usage["cache_hits"]) == (2, 0)
    assert usage["cost_usd"] == pytest.approx(2 * CALL_COST)
    assert usage["steps"] == {
        "plan#0": {"calls": 1, "cache_hits": 0},
        "summarize#0": {"calls": 1, "cache_hits": 0},
    }

    second = runner.invoke(app, ["assess", image, "-q", QUERY], env={"COLUMNS": "250"})
    assert second.exit_code == 0, second.output
    assert "VLM answers: plan#0 from cache (1), summarize#0 from cache (1)" in second.stdout
    assert "VLM usage: 0 VLM calls, 2 cache hits" in second.stdout
    assert "cost $0.0000" in second.stdout
    assert len(remote.server.requests) == 2

    third = runner.invoke(
        app, ["assess", image, "-q", QUERY, "--no-vlm-cache", "--no-store", "--json"]
    )
    assert third.exit_code == 0, third.output
    assert len(remote.server.requests) == 4
    assert json.loads(third.stdout)["vlm_usage"]["calls"] == 2


def ten_item_manifest(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    original = Image.open(REPO / "examples" / "i03_reference.png").convert("RGB")
    rows = []
    for index in range(10):
        degrade(original, "blur", 1 + index % 4).save(folder / f"{index}.png")
        rows.append({"image": f"data/{index}.png", "id": f"i{index}", "query": QUERY})
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return big


def test_estimate_runs_a_sample_and_extrapolates(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = ten_item_manifest(tmp_path)
    results = tmp_path / "results.sqlite3"
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{results}")
    monkeypatch.setenv("AGENTIC_IQA_JOB_WINDOW", "3")

    result = runner.invoke(
        app, ["eval", "estimate", str(big), "--measure", "2", "--workers", "4", "--json"]
    )
    assert result.exit_code == 0, result.output
    estimate = json.loads(result.stdout)
    assert len(remote.server.requests) == 4  # two items, two calls each, nothing cached
    assert (estimate["sample_items"], estimate["total_items"]) == (2, 10)
    assert estimate["concurrency"] == 3  # --workers 4, capped by job_window
    assert estimate["calls"] == pytest.approx(20)
    assert estimate["input_tokens"] == pytest.approx(20 * 1000)
    assert estimate["cost_usd"] == pytest.approx(20 * CALL_COST)
    assert estimate["cost_per_item_usd"] == pytest.approx(2 * CALL_COST)
    # Both measured items ran at once (3 in flight, as the job will run): one wave, whose
    # time is all pace and no warm-up.
    assert estimate["warmup_seconds"] == 0.0
    # The pace is the wave's own end over its items: the sample's time, less what the job's
    # end costs after its last item (on a loaded machine a good part of it).
    assert 0 < estimate["seconds_per_item"] <= estimate["sample_seconds"] / 2
    assert estimate["wall_seconds"] == pytest.approx(10 * estimate["seconds_per_item"])
    assert not results.exists()  # the results database was never touched
    assert "cost_usd_batch" not in estimate  # batch figures only when asked for


@pytest.mark.slow
def test_estimate_batch_prices_the_job_online_and_at_the_batch_discount(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = ten_item_manifest(tmp_path)
    host = remote.server.url.removeprefix("http://")
    prices = tmp_path / "batch-prices.yaml"  # the fake server's host: its own batch discount
    prices.write_text(
        f'endpoints:\n  "{host}":\n    gpt-4o: {{input: 2.50, output: 10.00,'
        f' cached_input: 1.25}}\nbatch_discount:\n  "{host}": 0.5\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("AGENTIC_IQA_PRICES_FILE", str(prices))
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'results.sqlite3'}")

    result = runner.invoke(
        app, ["eval", "estimate", str(big), "--measure", "2", "--batch", "--json"]
    )
    assert result.exit_code == 0, result.output
    estimate = json.loads(result.stdout)
    assert len(remote.server.requests) == 4  # the sample ran online: two items, two calls each
    assert estimate["cost_usd"] == pytest.approx(20 * CALL_COST)
    assert estimate["cost_usd_batch"] == pytest.approx(20 * CALL_COST * 0.5)
    assert estimate["cost_usd_batch"] / estimate["cost_usd"] == pytest.approx(0.5)
    assert estimate["cost_per_item_usd_batch"] == pytest.approx(CALL_COST)
    assert estimate["batch_discount"] == {host: 0.5}
    assert estimate["batch_rounds"] == 2  # plan, then the answer
    assert estimate["batch_wall_seconds_max"] == 2 * 24 * 3600

    text = runner.invoke(
        app, ["eval", "estimate", str(big), "--measure", "2", "--batch"], env={"COLUMNS": "400"}
    )
    assert text.exit_code == 0, text.output
    assert (
        f"batch (extrapolated from the sample): cost ${10 * CALL_COST:.4f} "
        f"(${CALL_COST:.4f} per item) against ${20 * CALL_COST:.4f} online: 0.50 x online "
        f"(batch_discount: {host} 0.5)"
    ) in text.stdout
    assert "about 2 rounds of batches" in text.stdout and "(at most 48 h)" in text.stdout
    assert "the sample ran online (2 items, 2 at once)" in text.stdout

    monkeypatch.setenv("AGENTIC_IQA_PRICES_FILE", str(tmp_path / "prices.yaml"))  # no discount
    unknown = json.loads(
        runner.invoke(
            app, ["eval", "estimate", str(big), "--measure", "2", "--batch", "--json"]
        ).stdout
    )
    assert unknown["cost_usd"] == pytest.approx(20 * CALL_COST)
    assert unknown["cost_usd_batch"] is None and unknown["batch_discount"] == {host: None}
    assert unknown["batch_unpriced_models"] == [f"gpt-4o at {host} in batch"]


def test_extrapolate_batch_applies_each_providers_discount_to_its_own_calls() -> None:
    """Two providers in one sample: each call at its own provider's factor; a missing one
    leaves the batch cost unknown and the text says which model."""
    table = PriceTable(
        {"gpt-4o": GPT_4O, "claude-sonnet-4-5": Price(3.0, 15.0, 0.3)},
        batch_discount={"openai": 0.5, "anthropic": 0.25},
    )
    usages = [
        ModelUsage("openai", "gpt-4o", 4, 0, 4000, 200, 1600, endpoint="api.openai.com"),
        ModelUsage("anthropic", "claude-sonnet-4-5", 2, 0, 2000, 100, 0),
    ]
    sample = summarize(usages, table)
    gpt, claude = 4 * CALL_COST, (2000 * 3.0 + 100 * 15.0) / 1e6
    assert sample["cost_usd"] == pytest.approx(gpt + claude)
    result = extrapolate(
        sample,
        sample_items=2,
        sample_seconds=4.0,
        total_items=20,
        concurrency=2,
        batch=batch_pricing(usages, table),
    )
    assert result["cost_usd"] == pytest.approx(10 * (gpt + claude))
    assert result["cost_usd_batch"] == pytest.approx(10 * (gpt * 0.5 + claude * 0.25))
    assert result["batch_discount"] == {"openai": 0.5, "anthropic": 0.25}
    assert result["batch_rounds"] == 3 and result["wall_seconds"] == pytest.approx(20.0)

    partial = PriceTable(table.prices, batch_discount={"openai": 0.5})
    unknown = extrapolate(
        sample,
        sample_items=2,
        sample_seconds=4.0,
        total_items=20,
        concurrency=2,
        batch=batch_pricing(usages, partial),
    )
    assert unknown["cost_usd_batch"] is None and unknown["cost_per_item_usd_batch"] is None
    assert unknown["batch_discount"] == {"openai": 0.5, "anthropic": None}
    assert describe_batch(unknown)[0] == (
        f"batch (extrapolated from the sample): cost unknown (unknown per item) against "
        f"${10 * (gpt + claude):.4f} online: unknown (no price for claude-sonnet-4-5 in batch) "
        "(batch_discount: openai 0.5, anthropic none)"
    )
