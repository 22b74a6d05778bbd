"""Where the database is, and how to connect to it safely from many processes.

SQLite is the zero-setup default (a file in the working directory); PostgreSQL is for many
workers on many machines.  Both are configured here so the rest of the code never branches on
the dialect:

- SQLite runs in WAL mode (readers do not block the writer) with ``synchronous=NORMAL`` (no
  fsync per commit; consistent after any crash), waits up to 30 s for a lock instead
  of failing, enforces foreign keys (for ON DELETE CASCADE), and starts every transaction with
  ``BEGIN IMMEDIATE``: a transaction that reads and then writes (``begin_step``) takes the write
  lock first, so two workers never both read "not started" and then fight over the upgrade to a
  write lock, which SQLite would refuse at once, without waiting.
- PostgreSQL connections are pinged before use, so a restarted server costs no failed task.

Engines are cached per URL and process.  Celery's prefork workers inherit the parent's engine
after ``fork()``; sharing a socket between processes corrupts both sides, so every cached engine
drops (without closing) its inherited connections in the child.
"""

from __future__ import annotations

import ast
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, CursorResult, Result, make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

import agentic_iqa
from iqa_tools.secret_env import read_variable, with_database_password

if TYPE_CHECKING:  # Alembic (its autogenerate and DDL machinery) is imported where it is used
    from alembic.config import Config

#: Environment variable naming the database (any SQLAlchemy URL).
DATABASE_URL_ENV = "AGENTIC_IQA_DATABASE_URL"
#: The SQLite file used when nothing is configured, in the working directory.
DEFAULT_SQLITE_FILE = "agentic-iqa.sqlite3"
#: Seconds (SQLite) a connection waits for another one's lock before giving up.
LOCK_TIMEOUT_S = 30
#: Execution option of :func:`read_scope`'s connections: a transaction that never writes.
_READ_ONLY = "agentic_iqa_read_only"

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def database_url() -> str:
    """Return ``AGENTIC_IQA_DATABASE_URL`` (or the file ``_FILE`` names, with
    ``AGENTIC_IQA_DATABASE_PASSWORD`` put in), else a SQLite file in the working directory."""
    configured = (read_variable(DATABASE_URL_ENV) or "").strip()
    if configured:
        return with_database_password(configured) or configured
    return f"sqlite:///{Path.cwd() / DEFAULT_SQLITE_FILE}"


def _normalise(url: str | URL) -> URL:
    """Map ``postgres://`` and ``postgresql://`` to psycopg 3, the driver this project installs."""
    parsed = make_url(url)
    if parsed.drivername in {"postgres", "postgresql"}:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def build_engine(url: str | URL, *, foreign_keys: bool = True, pooled: bool = True) -> Engine:
    """Build a new, uncached engine with this project's connection settings.

    Migrations use ``foreign_keys=False, pooled=False``: SQLite's batch migrations copy and drop
    tables, and with foreign keys on, dropping ``runs`` would cascade into every child row.
    """
    parsed = _normalise(url)
    options: dict[str, Any] = {}
    if not pooled:
        options["poolclass"] = NullPool
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": LOCK_TIMEOUT_S}, **options)
        _configure_sqlite(engine, foreign_keys=foreign_keys)
        return engine
    return create_engine(parsed, pool_pre_ping=True, **options)


#: SQLite's extended error code for "the -shm file could not be grown" (a full disk).
SQLITE_IOERR_SHMSIZE = 4874
#: ``info`` key of a pooled SQLite connection opened in exclusive locking mode.
_EXCLUSIVE = "agentic_iqa_exclusive"


def _configure_sqlite(engine: Engine, *, foreign_keys: bool) -> None:
    """PRAGMAs on every new connection, and SQLAlchemy (not sqlite3) in charge of BEGIN."""

    @event.listens_for(engine, "do_connect")
    def _do_connect(dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
        # A WAL database that no process has open needs room for its -shm file before the
        # first read: on a full disk even `eval status` would fail ("disk I/O error").  Such a
        # connection retries in exclusive locking mode, which keeps that index in memory: reads
        # work, and a write fails as "database or disk is full", which says what to do.
        connection = dialect.connect(*cargs, **cparams)
        record.info.pop(_EXCLUSIVE, None)
        try:
            connection.execute("PRAGMA schema_version").fetchall()
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) != SQLITE_IOERR_SHMSIZE:
                raise
            connection.close()
            connection = dialect.connect(*cargs, **cparams)
            connection.execute("PRAGMA locking_mode=EXCLUSIVE")
            record.info[_EXCLUSIVE] = True
        return connection

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        # An exclusive connection keeps its lock until it is closed: closed at once, it keeps
        # no other connection (a migration's, another process's) waiting for it.
        if record is not None and record.info.get(_EXCLUSIVE):
            record.invalidate()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # sqlite3's own transaction handling skips BEGIN before SELECTs and SAVEPOINTs; turn it
        # off and let the "begin" hook below start every transaction.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: commits stay atomic and the file consistent after any crash; only a
        # power cut may roll back the last commits, which leases and resume redo.  FULL would
        # fsync every step's commit, several per item.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={LOCK_TIMEOUT_S * 1000}")
        cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        read_only = connection.get_execution_options().get(_READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def make_engine(url: str | None = None) -> Engine:
    """Return the engine for ``url`` (default: :func:`database_url`), one per URL and process."""
    key = _normalise(url or database_url()).render_as_string(hide_password=False)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = build_engine(key)
        return engine


class NoDatabase(FileNotFoundError):
    """The SQLite file a command would read is not there (opening it would create it empty)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"no results database at {path}")
        self.path = path


def sqlite_file(url: str | URL) -> Path | None:
    """Return the file a SQLite URL names, made absolute; None for a server, an in-memory database
    or a URI filename (``?uri=true``), which this code does not second-guess."""
    parsed = make_url(url)
    if (
        parsed.get_backend_name() != "sqlite"
        or parsed.database in (None, "", ":memory:")
        or parsed.query.get("uri")
    ):
        return None
    return Path(parsed.database).absolute()


def existing_engine(url: str | None = None) -> Engine:
    """Return :func:`make_engine`'s engine for a command that only reads: SQLite creates a missing
    file on connect, so a status or report run from the wrong folder would leave an empty database
    behind and say "no job"; this raises :class:`NoDatabase` instead, and creates nothing."""
    path = sqlite_file(url or database_url())
    if path is not None and not path.is_file():
        raise NoDatabase(path)
    return make_engine(url)


def dispose_engines(url: str | None = None) -> None:
    """Close the pooled connections of one cached engine (or all) and forget it."""
    key = None if url is None else _normalise(url).render_as_string(hide_password=False)
    with _engines_lock:
        for cached in [k for k in _engines if key is None or k == key]:
            _engines.pop(cached).dispose()


def _after_fork_in_child() -> None:
    # A fresh lock: another thread of the parent may have held it at the fork, and would never
    # release it here.  close=False: the connections belong to the parent, which keeps them.
    global _engines_lock
    _engines_lock = threading.Lock()
    _sqlite_writers.clear()  # a parent thread may have held one at the fork
    for engine in list(_engines.values()):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_after_fork_in_child)


#: One lock per SQLite engine of this process (see :func:`session_scope`).
_sqlite_writers: dict[int, threading.RLock] = {}


def _writer_lock(engine: Engine) -> Any:
    if engine.dialect.name != "sqlite":
        return nullcontext()
    with _engines_lock:
        return _sqlite_writers.setdefault(id(engine), threading.RLock())


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    """Open a session in one transaction: committed when the block ends, rolled back if it raises.

    Objects stay usable after the commit (``expire_on_commit=False``), so a task can return
    what it read without another round trip.  On SQLite, where every transaction is a writer
    (``BEGIN IMMEDIATE``), the threads of one process queue on a lock first: a thread that
    found the database busy would otherwise sleep in SQLite's busy handler (1, 2, 5 ... 100 ms
    steps) long after the other thread committed.  Other processes still wait the SQLite way.
    """
    engine = engine or make_engine()
    with _writer_lock(engine), Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


@contextmanager
def read_scope(engine: Engine | None = None) -> Iterator[Session]:
    """Open a session that only reads (status displays, progress polls); what it read stays usable.

    On SQLite it starts with a plain ``BEGIN``, which takes no write lock, and skips this
    process's writer lock: a display polling every fraction of a second never makes a worker's
    commit wait in SQLite's busy handler.  Do not write in it.
    """
    engine = engine or make_engine()
    with (
        Session(engine.execution_options(**{_READ_ONLY: True}), expire_on_commit=False) as session,
        session.begin(),
    ):
        yield session


def changed_rows(result: Result[Any]) -> int:
    """Return the number of rows an UPDATE, INSERT or DELETE matched.

    ``Session.execute`` is typed to return a :class:`~sqlalchemy.engine.Result`; for those
    statements it is a :class:`~sqlalchemy.engine.CursorResult`, which holds the count.
    """
    return cast("CursorResult[Any]", result).rowcount


#: Rows of each index SQLite's ANALYZE reads (``PRAGMA analysis_limit``): a sample, so that
#: refreshing the statistics of a table of millions of items takes milliseconds, not a scan.
SQLITE_ANALYSIS_LIMIT = 1000
#: The tables whose statistics steer the hot queries (claim, counts, export pages).
ANALYZED_TABLES = ("job_items", "runs")
#: The tables a running job fills, refreshed as it grows
#: (:func:`.items.refresh_statistics_as_grown`).
GROWING_TABLES = ("job_items", "runs", "step_records", "tool_logs")


def analyze(session: Session, tables: tuple[str, ...] = ANALYZED_TABLES) -> None:
    """Refresh the query planner's statistics of ``tables``, in the session's transaction:
    after a bulk insert (a submit's rows) and when a job ends.  Without them PostgreSQL plans
    a page of an export as if the table were empty (43 ms a page at 100,000 items instead of
    0.6 ms), and SQLite may pick the index that makes it sort a whole job.  PostgreSQL samples
    30,000 rows a table whatever its size; SQLite reads :data:`SQLITE_ANALYSIS_LIMIT` rows of
    each index."""
    connection = session.connection()
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql(f"PRAGMA analysis_limit={SQLITE_ANALYSIS_LIMIT}")
    for table in tables:
        connection.exec_driver_sql(f"ANALYZE {table}")


def migrations_dir() -> Path:
    """Return the Alembic scripts' folder: ``migrations/`` beside the package, or in a wheel's."""
    package = Path(agentic_iqa.__file__).resolve().parent
    for candidate in (package.parent / "migrations", package / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        f"Alembic migrations not found in {package.parent / 'migrations'} or "
        f"{package / 'migrations'}"
    )


def alembic_config(url: str | None = None) -> Config:
    """Build an Alembic ``Config`` for ``url`` (default: :func:`database_url`), no alembic.ini."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # The value goes through configparser interpolation: a literal % must be doubled.
    rendered = _normalise(url or database_url()).render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision`` (``alembic upgrade head`` from Python)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def ensure_schema(engine: Engine) -> None:
    """Create or update an embedded SQLite database on first use; servers are migrated on purpose.

    The README's first command must work on a fresh machine with no setup, so the embedded
    default migrates itself.  A PostgreSQL schema changes only by ``agentic-iqa db upgrade``
    (the one-shot ``migrate`` service of docker-compose): several workers racing to migrate a
    shared database is how schemas break.

    Every command that opens the database calls this, so a database already at the head
    revision must cost no more than one small query: importing Alembic's migration machinery
    (its DDL implementations for every dialect, autogenerate) and running ``alembic upgrade``
    takes several tenths of a second, longer than the rest of ``agentic-iqa eval status``.  The
    revision stored in ``alembic_version`` is compared with the heads of the scripts in
    :func:`migrations_dir`, read as text (:func:`script_heads`); anything else (no table yet,
    an older revision, a script that cannot be read) goes through ``alembic upgrade`` as before,
    which remains the only code that changes the schema.
    """
    if engine.dialect.name == "sqlite":
        if _at_head(engine):
            return
        upgrade(engine.url.render_as_string(hide_password=False))


def script_heads(directory: Path | None = None) -> set[str]:
    """Return the head revisions of the migration scripts, read without importing Alembic or them.

    Each ``versions/*.py`` declares ``revision`` and ``down_revision`` as module-level literals
    (Alembic's template); a head is a revision that no script names as its ``down_revision``.
    Raises ``ValueError`` when a script does not declare them that way.
    """
    versions = (directory or migrations_dir()) / "versions"
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in sorted(versions.glob("*.py")):
        found: dict[str, Any] = {}
        for node in ast.parse(script.read_text(encoding="utf-8"), str(script)).body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name, value = node.target.id, node.value
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                name, value = node.targets[0].id, node.value
            else:
                continue
            if name in {"revision", "down_revision"} and value is not None:
                found[name] = ast.literal_eval(value)
        revision = found.get("revision")
        if not isinstance(revision, str):
            raise ValueError(f"{script}: no literal 'revision'")
        revisions.add(revision)
        down = found.get("down_revision")
        parents.update([down] if isinstance(down, str) else (down or ()))
    if not revisions:
        raise ValueError(f"no migration scripts in {versions}")
    return revisions - parents


def _at_head(engine: Engine) -> bool:
    """Tell whether the database's stored revisions are exactly the scripts' heads.

    Read on a raw DBAPI connection, outside any transaction: the engine begins every
    transaction with ``BEGIN IMMEDIATE`` (a write lock), and this read must not queue behind a
    worker's writes.  Any failure (a new file without ``alembic_version``) means "not at head".
    """
    try:
        heads = script_heads()
        connection = engine.raw_connection()
        try:
            cursor = connection.cursor()
            cursor.execute("SELECT version_num FROM alembic_version")
            stored = {row[0] for row in cursor.fetchall()}
            cursor.close()
        finally:
            connection.close()
    except Exception:  # noqa: BLE001 - the full upgrade below reports any real problem
        return False
    return stored == heads
