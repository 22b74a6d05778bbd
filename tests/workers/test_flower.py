"""Flower starts against the app, behind basic auth, and sees a worker of the pipeline."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, auth: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_flower_monitors_the_pipeline_behind_basic_auth(make_cluster, sqlite_url, tmp_path):
    cluster = make_cluster(sqlite_url)
    hostname = cluster.start("default", "default")
    port = free_port()
    log = (tmp_path / "flower.log").open("wb")
    flower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "workers.celery_app:app",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
            "--basic-auth=admin:s3cret",
        ],
        cwd=REPO,
        env=cluster.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if get(f"{base}/healthcheck")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"flower did not start; see {log.name}")
        assert get(f"{base}/api/workers")[0] == 401
        seen = b""
        while time.monotonic() < deadline:
            status, seen = get(f"{base}/api/workers?refresh=1", "admin:s3cret")
            assert status == 200
            if hostname.encode() in seen:
                break
            time.sleep(1)
        worker = json.loads(seen)[hostname]
        assert "agentic_iqa.step.tool_execution" in worker["registered"]
        assert "agentic_iqa.coordinate" in worker["registered"]
        assert [queue["name"] for queue in worker["active_queues"]] == ["default"]
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(timeout=20)
