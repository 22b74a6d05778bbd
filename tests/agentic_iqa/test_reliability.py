"""Reliability outside the worker fleet, one test each: caches answer only their own
request, credentials are masked by structure, inputs are bounded, and infrastructure errors are
one line and exit 2 with nothing stored."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.jobs.manifest import ManifestError, read_manifest
from agentic_iqa.redact import redact
from agentic_iqa.vlm import BackendConfig, create_client
from agentic_iqa.vlm.base import VLMRequest
from iqa_tools.errors import ImageTooLargeError
from iqa_tools.images import probe_image
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply, openai_completion
from tests.conftest import REPO

runner = CliRunner()


def test_the_response_cache_never_answers_for_another_endpoint_path(monkeypatch, tmp_path):
    """`.../ok/v1` then `.../ok2/v1` on one host: two servers, two calls, two answers."""
    monkeypatch.setenv("TEST_KEY", "sk-test-cache-path")
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", f"sqlite:///{tmp_path / 'cache.sqlite3'}")

    def answer(request: Recorded) -> Reply:
        return Reply(200, openai_completion("Bad" if request.path.startswith("/ok2/") else "Good"))

    with FakeAPIServer(answer) as server:
        request = VLMRequest(task="plan", system="s", user="u", json_output=False)
        replies = []
        for path in ("ok", "ok2", "ok"):
            client = create_client(
                "planner",
                {
                    "planner": BackendConfig(
                        backend="openai",
                        model="m",
                        base_url=f"{server.url}/{path}/v1",
                        api_key_env="TEST_KEY",
                        max_retries=0,
                    )
                },
            )
            response = client.complete(request)
            replies.append((response.text, response.cached))
        calls = len(server.requests)
    # the first /ok/ answer is cached; /ok2/ is another endpoint (before: a hit, "Good")
    assert replies == [("Good", False), ("Bad", False), ("Good", True)]
    assert calls == 2


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("failed at http://vlm:8000/v1?key=s3cr3tvalue", "s3cr3tvalue"),
        ("https://proxy.example/v1?api-version=1&sas=AbC123xyz failed", "AbC123xyz"),
        ("postgresql://iqa:hunter22@db/agentic?sslpassword=pw99999", "hunter22"),
    ],
)
def test_every_urls_query_string_and_userinfo_are_masked_whatever_the_names(text, hidden):
    masked = redact(text)
    assert hidden not in masked and "***" in masked


@pytest.mark.slow
def test_a_key_in_the_base_urls_query_string_is_stored_nowhere(monkeypatch, tmp_path):
    """A failing call's error quotes the base URL: the stored run, its error and the CLI's
    output carry no ``?key=...``."""
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'r.sqlite3'}")
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-query-key")
    with FakeAPIServer(lambda _r: Reply(500, {"error": {"message": "down"}})) as server:
        url = f"{server.url}/v1?key=qsecret123456"
        result = runner.invoke(
            app,
            [
                "assess",
                str(REPO / "examples/i03_blurred.png"),
                "-q",
                "Rate this image.",
                "--json",
                "--backend",
                "openai",
                "--model",
                "m",
                "--base-url",
                url,
            ],
        )
    stored = (tmp_path / "r.sqlite3").read_bytes()
    assert b"qsecret123456" not in stored and "qsecret123456" not in result.output


def test_an_image_over_the_explicit_pixel_cap_is_refused_from_its_header(tmp_path, monkeypatch):
    """A 13000x13000 JPEG of 2.6 MB (under the decode ceiling): accepted by default (memory is
    bounded per tool call in bytes), refused with its size in milliseconds, before its pixels
    are decoded, and a bad row of a manifest, under an explicit AGENTIC_IQA_MAX_PIXELS."""
    path = tmp_path / "huge.jpg"
    Image.new("RGB", (13000, 13000), (120, 130, 140)).save(path, quality=90)
    monkeypatch.setenv("AGENTIC_IQA_MAX_PIXELS", str(100_000_000))
    with pytest.raises(
        ImageTooLargeError,
        match=r"13000x13000 pixels \(169.0 MP\), above "
        r"the budget of 100.0 MP",
    ):
        probe_image(path)
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"image,mos\n{path},3\n")
    (entry,) = read_manifest(manifest)
    assert isinstance(entry, ManifestError) and "AGENTIC_IQA_MAX_PIXELS" in entry.message
    monkeypatch.delenv("AGENTIC_IQA_MAX_PIXELS")
    assert probe_image(path) == (13000, 13000)


@pytest.mark.parametrize("mos", ["9" * 400, "1e400", "-1e7"])
def test_an_absurd_mos_is_a_bad_row_not_a_traceback(mos, tmp_path):
    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((64, 64, 3), np.uint8) + 100).save(image)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(f'{{"image": "{image}", "mos": {mos}}}\n')
    (entry,) = read_manifest(manifest)
    assert isinstance(entry, ManifestError)
    assert "mos" in entry.message and len(entry.message) < 300


def test_submit_with_the_broker_down_stores_nothing_and_exits_2(tmp_path, monkeypatch):
    results = tmp_path / "r.sqlite3"
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{results}")
    monkeypatch.setenv("AGENTIC_IQA_BROKER_URL", "redis://127.0.0.1:1/0")
    result = runner.invoke(app, ["eval", "submit", str(REPO / "examples")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        line for line in result.output.strip().splitlines() if line.startswith("error:")
    ]
    assert "the broker at redis://127.0.0.1:1/0 does not answer" in result.output
    assert not results.exists()


def test_submit_to_a_read_only_database_is_one_line_and_exit_2(tmp_path, monkeypatch):
    from agentic_iqa.db import upgrade

    results = tmp_path / "r.sqlite3"
    upgrade(f"sqlite:///{results}")
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///file:{results}?mode=ro&uri=true")
    result = runner.invoke(app, ["eval", "submit", str(REPO / "examples")])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "refused the job: attempt to write a readonly database" in result.output


def test_tools_run_with_an_unreachable_score_cache_is_one_line_and_exit_2(monkeypatch):
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "redis://:pw123456@127.0.0.1:1/0")
    result = runner.invoke(app, ["tools", "run", "PIQE", str(REPO / "examples/i03_blurred.png")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "the tool-score cache at redis://***@127.0.0.1:1/0 does not answer" in result.output


def test_an_estimate_whose_every_sample_failed_says_so_instead_of_zeros(tmp_path, monkeypatch):
    from tests.conformance.harness import simulated
    from tests.conformance.items import images, scoring, write_manifest
    from tests.conformance.simulated_model import Behaviour

    items = scoring(images(tmp_path / "images", 3), 3, seed=0)
    with simulated(Behaviour.ALWAYS_REFUSES, items) as (server, _model):
        monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
        result = runner.invoke(
            app,
            [
                "eval",
                "estimate",
                str(write_manifest(items, tmp_path / "m.csv")),
                "--measure",
                "2",
                "--backend",
                "openai",
                "--model",
                "sim",
                "--base-url",
                f"{server.url}/v1",
            ],
        )
    assert result.exit_code == 1
    assert "every sampled item failed (2 of 2)" in result.output
    assert "the model refused" in result.output and "cost $0.0000" not in result.output
    assert json.dumps(result.output)  # one readable line, no traceback
    assert "Traceback" not in result.output
