"""What a job wrote and who served it: SQLite rows and bytes, a PostgreSQL database's
backends and write statistics, a Redis server's process and counters (benchmarks/own_cost.py)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

#: The application name of the observer's own PostgreSQL connection, left out of the backends.
OBSERVER = "own_cost_observer"


def sqlite_footprint(path: Path) -> dict[str, Any]:
    """Rows of every table and the bytes of the database file with its write-ahead log."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        rows = {t: connection.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    size = sum(
        Path(f"{path}{suffix}").stat().st_size
        for suffix in ("", "-wal")
        if Path(f"{path}{suffix}").exists()
    )
    return {"rows": rows, "bytes": size}


class Observer:
    """This benchmark's view of a distributed job: its own PostgreSQL connection (left out
    of the backends it meters), the scratch database's backends, Redis's process and counters."""

    def __init__(self, url: str, redis_url: str) -> None:
        import redis
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url

        self.database = make_url(url).database
        self.engine = create_engine(url, connect_args={"application_name": OBSERVER})
        self.redis = redis.Redis.from_url(redis_url)
        self.redis_pid = int(self.redis.info("server")["process_id"])

    def backends(self) -> list[int]:
        """Pids of the scratch database's backends, less the observer's own."""
        from sqlalchemy import text

        with self.engine.connect() as connection:
            return [
                int(pid)
                for (pid,) in connection.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = :db "
                        "AND coalesce(application_name, '') <> :me"
                    ),
                    {"db": self.database, "me": OBSERVER},
                )
            ]

    def pg_writes(self) -> dict[str, int]:
        """Tuples written to the user tables, commits and the database's size, now."""
        from sqlalchemy import text

        with self.engine.connect() as connection:
            connection.execute(text("SELECT pg_stat_clear_snapshot()"))
            ins, upd, dele = connection.execute(
                text(
                    "SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), "
                    "coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables"
                )
            ).one()
            commits, size = connection.execute(
                text(
                    "SELECT xact_commit, pg_database_size(datname) FROM pg_stat_database "
                    "WHERE datname = :db"
                ),
                {"db": self.database},
            ).one()
        return {
            "inserted": int(ins),
            "updated": int(upd),
            "deleted": int(dele),
            "commits": int(commits),
            "bytes": int(size),
        }

    def redis_counters(self) -> dict[str, int]:
        stats = self.redis.info("stats")
        return {
            "commands": int(stats["total_commands_processed"]),
            "bytes in": int(stats["total_net_input_bytes"]),
        }

    def close(self) -> None:
        self.engine.dispose()
        self.redis.close()


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in after}
