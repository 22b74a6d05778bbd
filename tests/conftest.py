"""Shared fixtures.

Tests never touch the user's caches: TORCH_HOME, HF_HOME and XDG_CACHE_HOME point into a
temporary folder before anything imports torch, so "weights missing" is deterministic.

The test data (real images with human scores, TID2013 pairs, NIQE/BRISQUE parameter files) is
in the repository, ``tests/data`` (its README says what and whence); ``AGENTIC_IQA_DATA_DIR``
names a folder of the same layout to read instead, such as the complete copy
``scripts/fetch_data.py`` makes.  A test whose data that folder lacks is skipped with the
command that gets it (a failure under ``AGENTIC_IQA_TEST_REQUIRE_SERVICES``, as in CI).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

_SANDBOX = Path(tempfile.mkdtemp(prefix="agentic-iqa-tests-"))
for _variable, _sub in (("TORCH_HOME", "torch"), ("HF_HOME", "hf"), ("XDG_CACHE_HOME", "cache")):
    os.environ[_variable] = str(_SANDBOX / _sub)
os.environ["HF_HUB_OFFLINE"] = "1"
# Settings from the developer's shell must not leak into tests; test knobs and the data dir stay.
for _variable in [v for v in os.environ if v.startswith("AGENTIC_IQA_")]:
    if _variable == "AGENTIC_IQA_DATA_DIR" or _variable.startswith("AGENTIC_IQA_TEST_"):
        continue
    del os.environ[_variable]

REPO = Path(__file__).resolve().parent.parent


#: The data in the repository: all of livec-dev, tid2013-calibration and pyiqa-weights, and the
#: first 20 photos of livec-extra (what the tests read).
REPOSITORY_DATA = REPO / "tests" / "data"
FETCH_DATA = "run `python scripts/fetch_data.py --into DIR` and set AGENTIC_IQA_DATA_DIR=DIR"


def _data_dir() -> Path:
    """``AGENTIC_IQA_DATA_DIR`` when set, else the repository's ``tests/data``."""
    configured = os.environ.get("AGENTIC_IQA_DATA_DIR")
    return Path(configured) if configured else REPOSITORY_DATA


def missing_data(what: str) -> NoReturn:
    """Skip (fail where services are required): the data folder lacks ``what``; the reason
    says how to get it."""
    message = f"needs {what}: not in {_data_dir()}; {FETCH_DATA}"
    if os.environ.get("AGENTIC_IQA_DATA_DIR") and (REPOSITORY_DATA / what.split()[0]).exists():
        message += " (or unset AGENTIC_IQA_DATA_DIR: the repository's tests/data has it)"
    if _services_required():
        pytest.fail(message)
    pytest.skip(message)


def _data_set(name: str, marker: str) -> Path:
    path = _data_dir() / name
    if not (path / marker).is_file():
        missing_data(name)
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = _data_dir()
    if not path.is_dir():
        missing_data("the test data")
    return path


@pytest.fixture(scope="session")
def weights_dir(data_dir: Path) -> Path:
    return _data_set("pyiqa-weights", "niqe_modelparameters.mat")


@pytest.fixture(scope="session")
def tid_dir(data_dir: Path) -> Path:
    return _data_set("tid2013-calibration", "calibration_summary.csv")


@pytest.fixture(scope="session")
def livec_dir(data_dir: Path) -> Path:
    return _data_set("livec-dev", "mos.csv")


@pytest.fixture(scope="session")
def livec_extra_dir(data_dir: Path) -> Path:
    """LIVE-C photos the builtin was never fitted on (the first 20 are in the repository)."""
    return _data_set("livec-extra", "mos.csv")


def example_photo(size: tuple[int, int] = (320, 240)) -> Image.Image:
    """A real photo (the repository's example, TID2013's I03 reference) cropped to ``size``:
    for tests that compare the agent's verdicts, which are fitted on photographs (the
    synthetic :func:`natural_image` has a 32-pixel checkerboard that reads as JPEG blocking)."""
    photo = Image.open(Path(__file__).resolve().parent.parent / "examples/i03_reference.png")
    return photo.convert("RGB").crop((0, 0, *size))


def natural_image(seed: int = 0, size: tuple[int, int] = (256, 192)) -> np.ndarray:
    """A smooth, textured, photo-like RGB image (uint8) that every NR metric can digest."""
    rng = np.random.default_rng(seed)
    width, height = size
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [
            0.5 + 0.35 * np.sin(x / 23.0 + seed) * np.cos(y / 31.0),
            0.5 + 0.3 * np.cos((x + y) / 37.0),
            0.45 + 0.3 * np.sin(y / 19.0 - seed),
        ],
        axis=2,
    )
    edges = ((x // 32 + y // 32) % 2).astype(np.float32)[:, :, None] * 0.15
    texture = rng.normal(0, 0.02, size=(height, width, 3)).astype(np.float32)
    return (np.clip(base + edges + texture, 0, 1) * 255).round().astype(np.uint8)


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    path = tmp_path / "photo.png"
    Image.fromarray(natural_image()).save(path)
    return path


def _services_required() -> bool:
    return os.environ.get("AGENTIC_IQA_TEST_REQUIRE_SERVICES", "") not in {"", "0", "false"}


# Redis has 16 numbered databases; each pytest-xdist worker takes its own pair (data and broker)
# so parallel workers never flush or consume each other's queues.
MAX_PARALLEL_WORKERS = 8


def xdist_index() -> int:
    """0 without pytest-xdist, n for worker "gwn"."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(name.removeprefix("gw") or 0)
    if index >= MAX_PARALLEL_WORKERS:
        pytest.fail(
            f"Redis has databases for {MAX_PARALLEL_WORKERS} parallel test workers; "
            f"run with -n {MAX_PARALLEL_WORKERS} or fewer"
        )
    return index


def redis_database(url: str, number: int) -> str:
    """The same server as `url`, database `number`."""
    return f"{url.rsplit('/', 1)[0]}/{number}"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A Redis database for tests (15, less the xdist worker's index); skipped if none answers,
    unless services are required (CI)."""
    import redis

    base = os.environ.get("AGENTIC_IQA_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    url = redis_database(base, int(base.rsplit("/", 1)[1] or 15) - xdist_index())
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        if _services_required():
            pytest.fail(f"Redis required but not reachable at {url}: {exc}")
        pytest.skip(f"no Redis at {url}: {exc}")
    return url


# -- PostgreSQL: AGENTIC_IQA_TEST_POSTGRES_URL (default: database "test" on 127.0.0.1) ----------
# Each test session creates its own uniquely named databases there and drops them at the end.

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """A PostgreSQL database to create scratch databases from."""
    url = os.environ.get("AGENTIC_IQA_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    engine = create_engine(url, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        if _services_required():
            pytest.fail(f"PostgreSQL required but not reachable at {url}: {exc}")
        pytest.skip(f"no PostgreSQL at {url}: {exc.orig}")
    finally:
        engine.dispose()
    return url


@contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    """A new, empty database on the server (dropped afterwards); yields its URL."""
    from agentic_iqa.db import dispose_engines

    name = f"agentic_iqa_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield url
    finally:
        dispose_engines(url)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """This session's migrated PostgreSQL database."""
    from agentic_iqa.db import upgrade

    with scratch_postgres(postgres_admin_url) as url:
        upgrade(url)
        yield url


def livec_manifest(
    livec_dir: Path, path: Path, count: int, extra_rows: tuple[tuple[str, str], ...] = ()
) -> Path:
    """A CSV manifest (image, mos) of the first ``count`` LIVE-C photos, plus ``extra_rows``."""
    import csv

    with (livec_dir / "mos.csv").open() as handle:
        rows = list(csv.DictReader(handle))[:count]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        for row in rows:
            writer.writerow([str(livec_dir / "images" / row["image"]), row["mos"]])
        writer.writerows(extra_rows)
    return path


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """A local S3-compatible server (moto's, from PyPI) for the tests of images in object
    storage: one per test module, each test in a bucket of its own."""
    import socket

    moto_server = pytest.importorskip("moto.server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A results database for jobs run through the CLI, and nothing from the caller's
    environment deciding the broker or the VLM (each test sets what it runs)."""
    url = f"sqlite:///{tmp_path / 'results.sqlite3'}"
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    monkeypatch.setenv("AGENTIC_IQA_DEVICE", "cpu")
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    for name in ("VLM_BACKEND", "VLM_MODEL", "VLM_BASE_URL"):
        monkeypatch.delenv(f"AGENTIC_IQA_{name}", raising=False)
    return url


@pytest.fixture
def object_store(moto_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The local S3 server as this process's store: its endpoint and a dummy credential in the
    environment only (as a deployment gives them), an empty object cache in the test's folder,
    no filesystem or digest remembered from another test; yields the endpoint."""
    from iqa_tools import images, storage

    for name, value in (
        ("AWS_ENDPOINT_URL", moto_url),
        ("AWS_ACCESS_KEY_ID", "dummy-key-id"),
        ("AWS_SECRET_ACCESS_KEY", "dummy-secret"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AGENTIC_IQA_OBJECT_CACHE", str(tmp_path / "objects")),
        ("AGENTIC_IQA_TOOL_CACHE", "memory"),
        ("AGENTIC_IQA_DEVICE", "cpu"),
    ):
        monkeypatch.setenv(name, value)
    for name in ("VLM_BACKEND", "VLM_MODEL", "VLM_BASE_URL", "BROKER_URL"):
        monkeypatch.delenv(f"AGENTIC_IQA_{name}", raising=False)
    monkeypatch.setattr(images, "_OBJECT_CACHE", [])
    storage.forget_filesystems()
    yield moto_url
    storage.forget_filesystems()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``stack`` tests (tests/stack: Docker, minutes) unless the ``-m`` expression
    names that marker, so that the README's command and every other selection run what they
    ran before; CI runs them as a step of their own (``pytest -m stack tests/stack``)."""
    if "stack" in (config.getoption("markexpr", "") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("stack") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
