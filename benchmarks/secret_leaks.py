"""Which secrets a deployed worker gives away to whoever reaches its broker or its Flower.

A real worker (``celery -A workers.celery_app:app worker``) of the checkout ``--code`` (default:
this one) runs against two password-protected Redis servers of this script's own (broker and
result backend, each with its own password), a PostgreSQL URL with a password (never
connected to: the supervisor is off) and an OpenAI key in its environment.  Flower runs beside
it, started as ``--flower`` says: ``agentic-iqa`` (``agentic-iqa flower --auth-file``) or
``celery`` (``celery ... flower --basic-auth=...``, the command the README gave before issue 48).
Printed: for each place a secret could show (``inspect conf`` with defaults, ``inspect report``,
``inspect stats``, Flower's ``/api/workers`` and ``/worker/<name>``, both processes' logs,
Flower's command line), how many of the four secrets (database, broker and result-backend
passwords, API key) and Flower's own password appear there, as given or URL-quoted.

    python benchmarks/secret_leaks.py [--code DIR] [--flower agentic-iqa|celery]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
SECRETS = {
    "database": "dbPW-7781@:/%qq",
    "broker": "brokerPW-5520@:/%zz",
    "backend": "backendPW-9931@:/%xx",
    "api_key": "sk-apikey-MEASURE-4410",
}
FLOWER_AUTH = "admin:flowerPW-1234"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str, auth: str | None = None) -> str:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode()


def collect(code: Path, flower_kind: str, folder: Path) -> dict[str, str]:
    """Start the servers, the worker and Flower; return each place's text."""
    from celery import Celery

    broker_port, backend_port, flower_port = free_port(), free_port(), free_port()
    servers = ((broker_port, SECRETS["broker"]), (backend_port, SECRETS["backend"]))
    for port, password in servers:
        subprocess.run(
            ["redis-server", "--daemonize", "yes", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", str(folder), "--requirepass", password],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    broker = f"redis://:{quote(SECRETS['broker'], safe='')}@127.0.0.1:{broker_port}/0"
    backend = f"redis://:{quote(SECRETS['backend'], safe='')}@127.0.0.1:{backend_port}/1"
    database = quote(SECRETS["database"], safe="")
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "AGENTIC_IQA_BROKER_URL": broker,
        "AGENTIC_IQA_RESULT_BACKEND": backend,
        "AGENTIC_IQA_DATABASE_URL": f"postgresql+psycopg://agentic:{database}@127.0.0.1/test",
        "OPENAI_API_KEY": SECRETS["api_key"],
        "AGENTIC_IQA_SUPERVISOR": "false",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
    }
    name = "measured@localhost"
    python = sys.executable
    worker_command = [python, "-m", "celery", "-A", "workers.celery_app:app", "worker"]
    worker_command += ["-n", name, "-c", "1", "--pool=solo", "-l", "INFO"]
    if flower_kind == "celery":
        flower_command = [python, "-m", "celery", "-A", "workers.celery_app:app", "flower"]
        flower_command += ["--address=127.0.0.1", f"--basic-auth={FLOWER_AUTH}"]
    else:
        (folder / "flower-auth").write_text(FLOWER_AUTH + "\n")
        flower_command = [python, "-m", "agentic_iqa", "flower"]
        flower_command += ["--auth-file", str(folder / "flower-auth")]
    flower_command.append(f"--port={flower_port}")
    processes = []
    texts: dict[str, str] = {}
    try:
        for command, log in ((worker_command, "worker.log"), (flower_command, "flower.log")):
            processes.append(
                subprocess.Popen(
                    command,
                    cwd=code,
                    env=env,
                    stdout=(folder / log).open("wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            )
        client = Celery(broker=broker)
        deadline = time.monotonic() + 90
        while not client.control.ping(destination=[name], timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker did not start: {folder / 'worker.log'}")
        inspect = client.control.inspect(destination=[name], timeout=5)
        texts["inspect conf (with defaults)"] = json.dumps(inspect.conf(with_defaults=True))
        texts["inspect report"] = json.dumps(inspect.report())
        texts["inspect stats"] = json.dumps(inspect.stats())
        base = f"http://127.0.0.1:{flower_port}"
        while True:
            try:
                get(f"{base}/healthcheck")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flower did not start: {folder / 'flower.log'}") from None
                time.sleep(0.5)
        for _ in range(30):
            workers = get(f"{base}/api/workers?refresh=1", FLOWER_AUTH)
            if "conf" in json.loads(workers).get(name, {}):
                break
            time.sleep(1)
        texts["flower /api/workers"] = workers
        texts[f"flower /worker/{name}"] = get(f"{base}/worker/{name}", FLOWER_AUTH)
        cmdline = Path(f"/proc/{processes[1].pid}/cmdline").read_bytes().replace(b"\0", b" ")
        texts["flower command line (ps)"] = cmdline.decode()
        client.close()
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            process.wait(timeout=20)
        for port, password in servers:
            subprocess.run(
                ["redis-cli", "-p", str(port), "-a", password, "--no-auth-warning", "shutdown",
                 "nosave"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
    texts["worker and flower logs"] = (folder / "worker.log").read_text(errors="replace") + (
        folder / "flower.log"
    ).read_text(errors="replace")
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout to run")
    parser.add_argument("--flower", choices=("agentic-iqa", "celery"), default="agentic-iqa")
    args = parser.parse_args()
    wanted = {**SECRETS, "flower": FLOWER_AUTH.partition(":")[2]}
    with tempfile.TemporaryDirectory() as folder:
        texts = collect(args.code.resolve(), args.flower, Path(folder))
    total = 0
    print(f"code: {args.code}  flower: {args.flower}")
    for where, text in texts.items():
        found = [k for k, v in wanted.items() if v in text or quote(v, safe="") in text]
        total += len(found)
        print(f"{where:36s} {len(found)} of 5  {', '.join(found) or '-'}")
    print(f"secrets shown, all places together: {total}")


if __name__ == "__main__":
    main()
