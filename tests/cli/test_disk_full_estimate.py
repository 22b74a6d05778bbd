"""The room a job stopped by a full disk says it needs is measured, and is enough.

A SQLite database on a small tmpfs (when this host can mount one) that already holds a large
earlier job, as a long-used results database does; the disk is filled to a few hundred KB and
a real job run here stops on it.  The "about N MB more" it names must be near what the rest of
the job takes (not the whole file's size over the items finished so far), and freeing just that
much must let ``eval resume`` finish every item.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

ITEMS = 24


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentic_iqa", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _leave_free(folder: Path, free: int) -> None:
    """Fill ``folder``'s filesystem with one file so that about ``free`` bytes stay free."""
    filler = folder / "filler"
    filler.unlink(missing_ok=True)
    stat = os.statvfs(folder)
    size = max(stat.f_bavail * stat.f_frsize - free, 0)
    with filler.open("wb") as handle:
        handle.truncate(0)
        for _ in range(size // (1 << 16)):
            handle.write(b"\0" * (1 << 16))


def test_a_job_stopped_by_a_full_disk_names_the_room_it_needs_and_that_room_suffices(
    tmp_path: Path,
) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{mount / 'r.sqlite3'}",
            "AGENTIC_IQA_TOOL_CACHE": "memory",
            "AGENTIC_IQA_DEVICE": "cpu",
            "AGENTIC_IQA_BROKER_URL": "",
            "AGENTIC_IQA_LOG_DIR": str(tmp_path),
            "COLUMNS": "300",
        }
        # An earlier job of 10,000 rows whose images are missing: some 4.5 MB of database.
        earlier = tmp_path / "earlier.csv"
        earlier.write_text("image\n" + "".join(f"gone{i}.png\n" for i in range(10_000)))
        assert _cli(env, tmp_path, "eval", "submit", str(earlier)).returncode in (0, 1)
        photo = (REPO / "examples/i03_blurred.png").read_bytes()
        for index in range(ITEMS):
            (tmp_path / f"p{index:02d}.png").write_bytes(photo)
        manifest = tmp_path / "m.csv"
        manifest.write_text("image\n" + "".join(f"p{i:02d}.png\n" for i in range(ITEMS)))

        _leave_free(mount, 400_000)
        stopped = _cli(env, tmp_path, "eval", "submit", str(manifest))
        assert stopped.returncode == 2, stopped.stderr[-2000:]
        found = re.search(r"free space \(about ([\d.]+) MB more\)", stopped.stderr)
        assert found, stopped.stderr[-2000:]
        said = int(float(found.group(1)) * 1_000_000)
        # Some 16 KB an item for the rest of 24, with the margin, and twice the 4 MB of
        # write-ahead log SQLite lets grow before a checkpoint; the whole file was 4.5 MB.
        assert 8_000_000 < said <= 9_500_000, stopped.stderr[-2000:]

        job = stopped.stdout.strip().splitlines()[0]
        _leave_free(mount, said)
        resumed = _cli(env, tmp_path, "eval", "resume", job)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert f"{ITEMS} done, 0 failed of {ITEMS} items" in resumed.stdout + resumed.stderr
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
