"""Alembic's entry point: which database to migrate, and how.

The URL is never in alembic.ini.  In order: ``alembic -x url=...``, ``sqlalchemy.url`` when set
programmatically (:func:`agentic_iqa.db.upgrade` does), else
:func:`agentic_iqa.db.engine.database_url`.  The engine has the project's settings, except that
SQLite's foreign keys are off while migrating: batch mode recreates tables, and dropping the old
``runs`` would otherwise cascade into every row that refers to it.  On PostgreSQL a migration
holds an advisory lock for its transaction, so upgrades started at once run one after another.
"""

from logging.config import fileConfig

from alembic import context

from agentic_iqa.db.engine import build_engine, database_url
from agentic_iqa.db.models import Base

config = context.config

if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata

#: The advisory lock every PostgreSQL migration holds for its transaction ("aiqa" in ASCII).
UPGRADE_LOCK = 0x61697161


def _url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
        or database_url()
    )


def run_migrations_offline() -> None:
    """Write the SQL instead of running it (``alembic upgrade head --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=_url().startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate in one transaction (SQLite included: the engine emits BEGIN itself)."""
    engine = build_engine(_url(), foreign_keys=False, pooled=False)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                transactional_ddl=True,
            )
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    # One migration at a time: a second `db upgrade` waits here, then finds the
                    # schema at head and does nothing (two at once raced to create the same
                    # tables and one failed with a UniqueViolation).
                    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({UPGRADE_LOCK})")
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
