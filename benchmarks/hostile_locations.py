"""A hostile manifest's locations through `eval submit`: requests that reached each server,
peak RSS and seconds (issue 41).

The servers run here, on loopback: moto's S3 behind a front that counts requests per bucket
(the configured endpoint, ``AWS_ENDPOINT_URL``), and two HTTP sites (photos, an admin page,
a redirect to the other site's port, a 1 GiB body with and without ``Content-Length``, a body
that stalls after its headers).  Each probe is submitted by a child process (a fresh SQLite
database and object cache each time, peak RSS polled and capped), so an old checkout that
reads a 1 GiB object whole is measured, not left to take the machine.  With ``--before DIR``
the probes also run against another checkout (a git worktree of an older commit):

    git worktree add /tmp/head-wt HEAD
    .venv/bin/python benchmarks/hostile_locations.py --before /tmp/head-wt
    git worktree remove --force /tmp/head-wt
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
PHOTO = (REPO / "examples" / "i03_blurred.png").read_bytes()
GIB = 1 << 30
RSS_LIMIT = 4 * GIB


class Counted:
    """Requests that reached a server, by (method, path without the query)."""

    def __init__(self) -> None:
        self.seen: Counter = Counter()
        self.lock = threading.Lock()

    def add(self, method: str, path: str) -> None:
        with self.lock:
            self.seen[(method, path.split("?")[0])] += 1

    def total(self, needle: str = "") -> int:
        with self.lock:
            return sum(n for (_, path), n in self.seen.items() if needle in path)


def site(counted: Counted, redirect_to: str = "") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.do_GET(body=False)

        def do_GET(self, body: bool = True) -> None:  # noqa: N802
            counted.add(self.command, self.path)
            path = self.path.split("?")[0]
            try:
                if path == "/photos/away.png":
                    self.send_response(301)
                    self.send_header("Location", f"{redirect_to}/photos/good.png")
                    self.end_headers()
                elif path in ("/photos/big.png", "/photos/stream.png"):
                    self.send_response(200)
                    if path == "/photos/big.png":
                        self.send_header("Content-Length", str(GIB))
                    self.end_headers()
                    block = b"\0" * (1 << 20)
                    for _ in range(GIB // len(block) if body else 0):
                        self.wfile.write(block)
                elif path.startswith("/photos/stall"):
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(PHOTO)))
                    self.end_headers()
                    if body:
                        self.wfile.flush()
                        time.sleep(600)
                elif path == "/photos/good.png":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(PHOTO)))
                    self.end_headers()
                    if body:
                        self.wfile.write(PHOTO)
                else:
                    self.send_response(200 if path == "/admin" else 404)
                    self.end_headers()
            except (BrokenPipeError, ConnectionResetError):
                return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def s3_front(counted: Counted, upstream: str) -> ThreadingHTTPServer:
    import http.client

    class Front(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _forward(self) -> None:
            counted.add(self.command, self.path)
            length = int(self.headers.get("Content-Length") or 0)
            payload = self.rfile.read(length) if length else None
            connection = http.client.HTTPConnection(upstream.removeprefix("http://"), timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            connection.request(self.command, self.path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "server", "date"):
                    self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import JobItem
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.submission import submit
from sqlalchemy import select
work = Path(sys.argv[1]); options = json.loads(sys.argv[2])
url = f"sqlite:///{work / 'results.sqlite3'}"
upgrade(url); engine = make_engine(url)
started = time.monotonic()
job = submit(engine, JobSpec.build(manifest=work / "m.csv", **options))
seconds = time.monotonic() - started
with session_scope(engine) as session:
    items = [[s, (e or "")[:160]] for s, e in session.execute(
        select(JobItem.status, JobItem.error).where(JobItem.job_id == job).order_by(JobItem.line))]
folder = work / "objects"
cache = [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []
secret = any(b"never fetched" in p.read_bytes() for p in cache if p.stat().st_size < 10**6)
print(json.dumps({"seconds": seconds, "items": items,
                  "cache_bytes": sum(p.stat().st_size for p in cache), "secret_cached": secret,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_child(checkout: Path, rows: list[str], options: dict, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="hostile-locations-") as scratch:
        work = Path(scratch)
        (work / "m.csv").write_text("image\n" + "".join(f"{row}\n" for row in rows))
        child_env = {
            **os.environ,
            **env,
            "PYTHONPATH": str(checkout),
            "AGENTIC_IQA_OBJECT_CACHE": str(work / "objects"),
            "XDG_CACHE_HOME": str(work / "cache"),
            "AGENTIC_IQA_TOOL_CACHE": "memory",
        }
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(work), json.dumps(options)],
            cwd=checkout,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        peak, killed = 0, False
        watched = psutil.Process(process.pid)
        while process.poll() is None:
            try:
                peak = max(peak, watched.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            if peak > RSS_LIMIT:
                process.kill()
                killed = True
            time.sleep(0.05)
        out, err = process.communicate()
        wall = time.monotonic() - started
        if killed:
            return {"killed": f"RSS above {RSS_LIMIT / GIB:.0f} GiB", "peak": peak, "wall": wall}
        if process.returncode != 0:
            return {"error": err.strip().splitlines()[-1:] or ["?"], "peak": peak, "wall": wall}
        result = json.loads(out.strip().splitlines()[-1])
        return {**result, "peak": max(peak, result["rss"]), "wall": wall}


def probes(photos: str, private: str, a: str, b: str) -> list[tuple[str, list[str], dict, dict]]:
    port = a.rsplit(":", 1)[1]
    return [
        (
            "hostile rows under --root s3://photos/set1",
            [
                f"s3://{photos}/set1/good.png",
                f"s3://{private}/private/secret.jpg",
                f"{a}/admin?action=delete-everything",
            ],
            {"root": f"s3://{photos}/set1"},
            {},
        ),
        (
            "a redirect to another port under --root http://A/photos",
            [f"{a}/photos/good.png", f"{a}/photos/away.png"],
            {"root": f"{a}/photos"},
            {},
        ),
        (
            "no --root: loopback spellings, another bucket, file:///etc/passwd",
            [
                f"http://[::1]:{port}/photos/good.png",
                f"http://0x7f000001:{port}/photos/good.png",
                f"http://localhost:{port}/photos/good.png",
                f"s3://{private}/private/secret.jpg",
                "file:///etc/passwd",
            ],
            {},
            {},
        ),
        ("a 1 GiB object, Content-Length given", ["big.png"], {"image_dir": f"{a}/photos"}, {}),
        ("a 1 GiB object, no Content-Length", ["stream.png"], {"image_dir": f"{a}/photos"}, {}),
        (
            "one stalled URL, AGENTIC_IQA_STORAGE_TIMEOUT=10",
            ["stall-0.png"],
            {"image_dir": f"{a}/photos"},
            {"AGENTIC_IQA_STORAGE_TIMEOUT": "10"},
        ),
        (
            "eight stalled URLs, AGENTIC_IQA_STORAGE_TIMEOUT=2",
            [f"stall-{n}.png" for n in range(1, 9)],
            {"image_dir": f"{a}/photos"},
            {"AGENTIC_IQA_STORAGE_TIMEOUT": "2"},
        ),
        (
            "one stalled URL, AGENTIC_IQA_STORAGE_TIMEOUT=10, AGENTIC_IQA_STORAGE_DEADLINE=20",
            ["stall-9.png"],
            {"image_dir": f"{a}/photos"},
            {"AGENTIC_IQA_STORAGE_TIMEOUT": "10", "AGENTIC_IQA_STORAGE_DEADLINE": "20"},
        ),
        (
            "a stalled URL beside a good one (the lookahead runs), AGENTIC_IQA_STORAGE_TIMEOUT=10",
            ["good.png", "stall-10.png"],
            {"image_dir": f"{a}/photos"},
            {"AGENTIC_IQA_STORAGE_TIMEOUT": "10"},
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout, run first")
    parser.add_argument("--only", type=int, nargs="*", help="probe numbers (1-based)")
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        moto_port = probe.getsockname()[1]
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    moto.start()
    upstream = f"http://127.0.0.1:{moto_port}"
    env = {
        "AWS_ACCESS_KEY_ID": "dummy",
        "AWS_SECRET_ACCESS_KEY": "dummy",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    os.environ.update(env)
    client = boto3.client("s3", endpoint_url=upstream)
    photos, private = "photos", "another-bucket"
    for bucket in (photos, private):
        client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=photos, Key="set1/good.png", Body=PHOTO)
    client.put_object(Bucket=private, Key="private/secret.jpg", Body=b"never fetched")
    store, web_a, web_b = Counted(), Counted(), Counted()
    front = s3_front(store, upstream)
    second = site(web_b)
    b = f"http://127.0.0.1:{second.server_address[1]}"
    first = site(web_a, redirect_to=b)
    a = f"http://127.0.0.1:{first.server_address[1]}"
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{front.server_address[1]}"
    checkouts = ([("before", args.before)] if args.before else []) + [("after", REPO)]
    for number, (name, rows, options, extra) in enumerate(probes(photos, private, a, b), 1):
        if args.only and number not in args.only:
            continue
        print(f"\n{number}. {name}")
        for label, checkout in checkouts:
            counts = (store.total(private), web_a.total("/admin"), web_a.total(), web_b.total())
            result = run_child(checkout, rows, options, {**env, **extra})
            reached = (
                store.total(private) - counts[0],
                web_a.total("/admin") - counts[1],
                web_a.total() - counts[2],
                web_b.total() - counts[3],
            )
            items = result.get("items", [])
            cached = result.get("cache_bytes", 0) / 2**20
            print(
                f"  {label:6} {result['wall']:6.1f} s wall, submit "
                f"{result.get('seconds', float('nan')):6.1f} s, peak RSS "
                f"{result['peak'] / 2**20:7.0f} MiB, cache {cached:7.1f} MiB; "
                f"requests reaching: other bucket {reached[0]}, admin {reached[1]}, "
                f"site A {reached[2]}, site B {reached[3]}; secret cached: "
                f"{result.get('secret_cached')}"
            )
            for status, error in items:
                print(f"         {status:8} {error}")
            for key in ("killed", "error"):
                if key in result:
                    print(f"         {key}: {result[key]}")
    moto.stop()


if __name__ == "__main__":
    main()
