"""Real Celery workers in subprocesses, on real Redis, for the pipeline tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from tests.conftest import REPO


class Cluster:
    """Workers of one test: a Redis database as broker, one results database, shared env."""

    def __init__(
        self, broker_url: str, database_url: str, logs: Path, env: dict[str, str] | None = None
    ) -> None:
        self.broker_url = broker_url
        self.database_url = database_url
        self.logs = logs
        self.tag = uuid.uuid4().hex[:8]
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "AGENTIC_IQA_BROKER_URL": broker_url,
            "AGENTIC_IQA_DATABASE_URL": database_url,
            "AGENTIC_IQA_TOOL_CACHE": "memory",
            "AGENTIC_IQA_DEVICE": "cpu",
            "AGENTIC_IQA_VISIBILITY_TIMEOUT": "6",
            "AGENTIC_IQA_UNACKED_RESTORE_INTERVAL": "1",
            # Short leases and a fast supervisor tick, so self-healing shows within a test.
            "AGENTIC_IQA_LEASE_SECONDS": "3",
            "AGENTIC_IQA_FEED_INTERVAL": "0.5",
            **(env or {}),
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.client = Celery(broker=broker_url)

    def start(
        self,
        name: str,
        queues: str,
        concurrency: int = 1,
        *,
        cli: bool = False,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        named: bool = True,
        pool: str = "prefork",
    ) -> str:
        """Start a worker and wait until it answers a ping; returns its hostname.

        ``pool``: the ``celery`` command's pool (``threads``: as compose's vlm-worker runs).

        ``cli=True`` starts it with ``agentic-iqa worker`` instead of the ``celery`` command;
        ``named=False`` (with ``cli``) gives it no ``--name``, so it takes its default one.
        ``cwd`` and ``env`` (added to the cluster's) give a worker a host of its own: its own
        working directory, ``HOME`` and caches.
        """
        hostname = f"{name}-{self.tag}@localhost"
        if not named:
            hostname = "+".join(queues.split(",")) + "@" + socket.gethostname()
        log = (self.logs / f"{name}-{len(self.processes)}.log").open("wb")
        if cli:
            command = [
                sys.executable,
                "-m",
                "agentic_iqa",
                "worker",
                "--queues",
                queues,
                "--concurrency",
                str(concurrency),
                *(["--hostname", hostname] if named else []),
            ]
        else:
            command = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers.celery_app:app",
                "worker",
                "-Q",
                queues,
                "-n",
                hostname,
                "-c",
                str(concurrency),
                f"--pool={pool}",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "INFO",
            ]
        self.processes[hostname] = subprocess.Popen(
            command,
            cwd=cwd or REPO,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.processes[hostname].poll() is not None:
                raise RuntimeError(f"worker {hostname} exited; see {log.name}")
            try:
                if self.client.control.ping(destination=[hostname], timeout=0.5):
                    return hostname
            except (redis.ConnectionError, OperationalError):
                continue  # the broker was restarted: the first ping meets a dead connection
        raise TimeoutError(f"worker {hostname} did not answer within 60 s; see {log.name}")

    def freeze(self, hostname: str) -> None:
        """SIGSTOP the worker and its pool processes: alive, holding what it holds, silent."""
        os.killpg(self.processes[hostname].pid, signal.SIGSTOP)

    def thaw(self, hostname: str) -> None:
        """SIGCONT: the frozen worker goes on where it stopped, unaware of the time passed."""
        os.killpg(self.processes[hostname].pid, signal.SIGCONT)

    def kill(self, hostname: str) -> None:
        """SIGKILL the worker and its pool processes: no goodbye, no ack."""
        process = self.processes.pop(hostname)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()
        self.client.close()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """A Redis of the test's own on a spare port, without persistence: killing it loses every
    queued message, as a restarted production broker without AOF would."""

    def __init__(self, logs: Path, port: int | None = None, password: str | None = None) -> None:
        self.port = port or free_port()
        self.logs = logs
        #: ``--requirepass``: every client must give it (``url`` holds none, ``secure_url`` does).
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def secure_url(self, database: int = 0, user: str = "", password: str | None = None) -> str:
        """The URL of ``database`` with ``user`` and the password in it, URL-quoted."""
        from urllib.parse import quote

        secret = quote(password or self.password or "", safe="")
        return f"redis://{quote(user, safe='')}:{secret}@127.0.0.1:{self.port}/{database}"

    def add_user(self, user: str, password: str) -> None:
        """Add an ACL user with every right and its own password."""
        import redis

        client = redis.Redis(port=self.port, password=self.password)
        client.acl_setuser(
            user,
            enabled=True,
            passwords=[f"+{password}"],
            keys=["*"],
            channels=["*"],
            commands=["+@all"],
        )
        client.close()

    def start(self) -> None:
        import redis

        log = (self.logs / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.logs),
                *(["--requirepass", self.password] if self.password else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        client = redis.Redis(port=self.port, password=self.password)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    client.close()
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise TimeoutError(f"redis-server on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL: no save, no goodbye to the clients."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
