"""A scoring job against a rate-limited remote VLM: throughput against what the limit allows.

A local OpenAI-compatible server stands in for the provider: it answers every VLM step of the
agent (plan, detection, analysis, tool selection, the five-level score with log-probabilities)
after ``--latency`` seconds (± ``--jitter``), counts requests per fixed window of ``--window``
seconds and answers 429 + ``Retry-After`` above ``--server-rpm``.  Two real Celery workers
(subprocesses, ``--pool threads --concurrency 64``, VLM steps on the ``vlm`` queue) work a job of
``--items`` synthetic photos with ``AGENTIC_IQA_VLM_BACKEND=openai`` pointed at it, the fleet's
limit set a bit below the server's (``--limit-rpm``, shared in Redis).  Then the same manifest is
submitted again: with a VLM response cache the re-run makes no calls.

Printed: items/s against the ideal the limit allows (limit-rpm / 60 / calls per item), 429s
received, calls and tokens (as the server reports usage) per item, and the re-run's calls.

    python benchmarks/vlm_scale.py                               # 500 items, 800 ms ± 200 ms
    python benchmarks/vlm_scale.py --items 100 --latency 0.2     # a quick check
    python benchmarks/vlm_scale.py --database-url postgresql+psycopg://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LEVELS = {"A": -2.5, "B": -1.2, "C": -0.4, "D": -1.6, "E": -3.5}

#: Starts a Celery worker whose backend clients are behind the fleet-wide limiter, inside the
#: response cache (a hit takes no turn), whether or not ``create_client`` already does so
#: (``rate_limited`` leaves a limited client as it is).
WORKER_BOOT = """
import sys
import agentic_iqa.vlm as vlm
from agentic_iqa.vlm.ratelimit import rate_limited
made_by = vlm._backend_client
vlm._backend_client = lambda role, configs: rate_limited(made_by(role, configs))
from celery.__main__ import main
sys.argv = ["celery", *sys.argv[1:]]
main()
"""


class Provider:
    """The rate-limited OpenAI-compatible server, with its counters."""

    def __init__(self, latency: float, jitter: float, limit: int, window: float) -> None:
        self.latency, self.jitter, self.limit, self.window = latency, jitter, limit, window
        self.lock = threading.Lock()
        self.windows: dict[int, int] = {}
        self.calls = self.rejected = self.tokens = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.request_queue_size = 512
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def counters(self) -> dict[str, int]:
        with self.lock:
            return {
                "calls": self.calls,
                "rejected": self.rejected,
                "tokens": self.tokens,
                "max_per_window": max(self.windows.values(), default=0),
            }

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        now = time.time()
        with self.lock:
            window = int(now // self.window)
            if self.windows.get(window, 0) >= self.limit:
                self.rejected += 1
                wait = math.ceil((window + 1) * self.window - now)
                error = {
                    "error": {
                        "message": "Rate limit reached",
                        "type": "rate_limit_error",
                        "param": None,
                        "code": None,
                    }
                }
                return 429, error, {"retry-after": str(max(1, wait))}
            self.windows[window] = self.windows.get(window, 0) + 1
        time.sleep(max(0.0, self.latency + random.uniform(-self.jitter, self.jitter)))
        messages = body.get("messages") or []
        system = str(messages[0].get("content", "")) if messages else ""
        prompt_chars = len(json.dumps(messages))
        content, logprobs = self.reply_for(system)
        completion_tokens = max(1, len(content) // 4)
        prompt_tokens = prompt_chars // 4
        with self.lock:
            self.calls += 1
            self.tokens += prompt_tokens + completion_tokens
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "logprobs": logprobs,
            "message": {"role": "assistant", "content": content, "refusal": None},
        }
        return (
            200,
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": int(now),
                "model": body.get("model", "bench"),
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
            {},
        )

    @staticmethod
    def reply_for(system: str) -> tuple[str, dict[str, Any] | None]:
        if system.startswith("You are the planner"):
            return json.dumps(
                {
                    "query_type": "IQA",
                    "query_scope": "Global",
                    "distortion_source": "Inferred",
                    "distortions": None,
                    "reference_mode": "No-Reference",
                    "required_tool": None,
                    "plan": {
                        "distortion_detection": True,
                        "distortion_analysis": True,
                        "tool_selection": True,
                        "tool_execution": True,
                    },
                }
            ), None
        if system.startswith("You are an expert in distortion detection"):
            return json.dumps({"distortion_set": {"Global": ["Noise"]}}), None
        if system.startswith("You are a distortion analysis expert"):
            return json.dumps(
                {
                    "distortion_analysis": {
                        "Global": [
                            {
                                "type": "Noise",
                                "severity": "moderate",
                                "explanation": "fine grain in the flat areas",
                            }
                        ]
                    }
                }
            ), None
        if system.startswith("You are a tool executor"):
            return json.dumps({"selected_tools": {"Global": {"Noise": "PIQE"}}}), None
        if system.startswith("You are an image quality expert"):
            top = [
                {"token": letter, "logprob": value, "bytes": list(letter.encode())}
                for letter, value in LEVELS.items()
            ]
            return "C", {
                "content": [
                    {"token": "C", "logprob": LEVELS["C"], "bytes": [67], "top_logprobs": top}
                ],
                "refusal": None,
            }
        return json.dumps({"final_answer": "C", "quality_reasoning": "moderate noise"}), None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, body, headers = provider.answer(json.loads(raw or b"{}"))
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Quiet."""

        return Handler


def write_manifest(folder: Path, items: int) -> Path:
    """``items`` distinct small noisy photos (synthetic, so no data set is needed)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:96, 0:128].astype(np.float32)
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "image", "mos"])
        for index in range(items):
            base = 0.5 + 0.3 * np.sin(x / (9 + index % 7) + index) * np.cos(y / 13.0)
            noise = rng.normal(0, 0.02 + 0.1 * (index % 5) / 5, size=(96, 128, 3))
            pixels = np.clip(base[:, :, None] + noise, 0, 1) * 255
            image = folder / f"photo{index:04d}.png"
            Image.fromarray(pixels.astype(np.uint8)).save(image)
            writer.writerow([f"item{index}", str(image), f"{1 + 4 * (index % 5) / 4:.2f}"])
    return path


def run_job(engine: Any, manifest: Path, broker: str) -> tuple[float, int, int]:
    from celery import Celery

    from agentic_iqa.jobs.spec import JobSpec
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit

    client = Celery(broker=broker)
    started = time.perf_counter()
    job_id = submit(engine, JobSpec.build(manifest=manifest))
    client.send_task("agentic_iqa.feed_job", args=(job_id,), queue="default")
    # Until every item has ended (the job's own status closes on a supervisor tick after that).
    final = progress(engine, job_id)
    while (
        final.status == "running"
        and final.counts.get("done", 0)
        + final.counts.get("failed", 0)
        + final.counts.get("cancelled", 0)
        < final.total
    ):
        time.sleep(0.5)
        final = progress(engine, job_id)
    client.close()
    return time.perf_counter() - started, final.total, final.counts.get("done", 0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.8, help="seconds per answer")
    parser.add_argument("--jitter", type=float, default=None, help="± seconds (latency / 4)")
    parser.add_argument("--server-rpm", type=int, default=1200, help="the provider's limit")
    parser.add_argument("--limit-rpm", type=int, default=1080, help="the fleet's configured limit")
    parser.add_argument(
        "--window", type=int, default=10, help="seconds per counting window (server and limiter)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64, help="threads per worker")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp folder")
    args = parser.parse_args()
    jitter = args.latency / 4 if args.jitter is None else args.jitter

    import redis

    redis.Redis.from_url(args.broker).flushdb()
    workdir = Path(tempfile.mkdtemp(prefix="iqa-vlm-scale-"))
    manifest = write_manifest(workdir, args.items)
    database = args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}"
    provider = Provider(args.latency, jitter, args.server_rpm * args.window // 60, args.window)
    provider.thread.start()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIC_IQA_")},
        "PYTHONPATH": str(REPO),
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_BROKER_URL": args.broker,
        "AGENTIC_IQA_DATABASE_URL": database,
        "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{workdir / 'cache.sqlite3'}",
        "AGENTIC_IQA_VLM_QUEUE": "vlm",
        "AGENTIC_IQA_JOB_WINDOW": str(4 * args.concurrency),
        "AGENTIC_IQA_VLM_BACKEND": "openai",
        "AGENTIC_IQA_VLM_MODEL": "bench-vl",
        "AGENTIC_IQA_VLM_BASE_URL": provider.url,
        "AGENTIC_IQA_VLM_TIMEOUT": "30",
        "AGENTIC_IQA_RATE_LIMIT_REQUESTS_PER_MINUTE": str(args.limit_rpm),
        "AGENTIC_IQA_RATE_LIMIT_WINDOW_SECONDS": str(args.window),
        "AGENTIC_IQA_RATE_LIMIT_MAX_WAIT": "240",
    }
    for role in ("PLANNER", "EXECUTOR", "SUMMARIZER"):
        env[f"AGENTIC_IQA_{role}_TIMEOUT"] = "30"
    os.environ.update(env)

    from agentic_iqa.db import upgrade
    from agentic_iqa.db.engine import make_engine

    upgrade(database)
    engine = make_engine(database)
    workers = []
    for index in range(args.workers):
        command = [
            sys.executable,
            "-c",
            WORKER_BOOT,
            "-A",
            "workers.celery_app:app",
            "worker",
            "-Q",
            "default,vlm,gpu",
            "-n",
            f"vlm{index}@bench",
            "-P",
            "threads",
            "-c",
            str(args.concurrency),
            "--without-gossip",
            "--without-mingle",
            "-l",
            "WARNING",
        ]
        log = (workdir / f"worker{index}.log").open("wb")
        workers.append(
            subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    try:
        from celery import Celery

        control = Celery(broker=args.broker)
        deadline = time.monotonic() + 90
        while len(control.control.ping(timeout=0.5)) < args.workers:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not start; logs in {workdir}")
        control.close()
        seconds, total, done = run_job(engine, manifest, args.broker)
        first = provider.counters()
        rerun_seconds, _, rerun_done = run_job(engine, manifest, args.broker)
        second = provider.counters()
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        provider.server.shutdown()

    calls_per_item = first["calls"] / max(1, done)
    ideal = args.limit_rpm / 60 / calls_per_item if calls_per_item else float("nan")
    rate = done / seconds
    print(
        f"{total} items ({done} done) through {args.workers} workers x {args.concurrency} "
        f"threads; server {args.server_rpm}/min per {args.window} s windows, latency "
        f"{args.latency:.2f} ± {jitter:.2f} s; fleet limit {args.limit_rpm}/min; {database}"
    )
    print(
        f"  items/s            {rate:.2f}  (ideal at the limit {ideal:.2f}: "
        f"{100 * rate / ideal:.0f} %)  in {seconds:.1f} s"
    )
    print(
        f"  429s received      {first['rejected']}  (most 200s in one server window: "
        f"{first['max_per_window']}, allowed {provider.limit})"
    )
    print(f"  calls per item     {calls_per_item:.2f}")
    print(f"  tokens per item    {first['tokens'] / max(1, done):.0f}  (as the server reports)")
    print(
        f"  re-run             {second['calls'] - first['calls']} calls, "
        f"{second['rejected'] - first['rejected']} 429s, {rerun_done} done in "
        f"{rerun_seconds:.1f} s"
    )
    print(f"  logs: {workdir}")


if __name__ == "__main__":
    main()
