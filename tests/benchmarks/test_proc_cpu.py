"""benchmarks/proc_cpu.py: the /proc reader and the per-item arithmetic behind
benchmarks/own_cost.py's figures (the benchmark itself needs the services and minutes)."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("proc_cpu", REPO / "benchmarks" / "proc_cpu.py")
assert _spec is not None and _spec.loader is not None
proc_cpu = sys.modules.setdefault("proc_cpu", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(proc_cpu)

TICKS = proc_cpu.CLOCK_TICKS


def stat_line(pid: int, name: str, ppid: int, utime: int, stime: int, start: int) -> str:
    """A /proc/<pid>/stat line as Linux writes it (52 fields), with the fields we read set."""
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 6 + [str(start)]
    return f"{pid} ({name}) {' '.join(fields + ['0'] * 30)}\n"


def fake_proc(root: Path, processes: dict[int, tuple[int, int, int, int]], uptime: float) -> Path:
    """A /proc of ``pid: (ppid, utime, stime, starttime)`` and the given uptime."""
    root.mkdir(exist_ok=True)
    for entry in root.iterdir():
        if entry.is_dir():
            (entry / "stat").unlink()
            entry.rmdir()
    for pid, (ppid, utime, stime, start) in processes.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(stat_line(pid, "w (x) y", ppid, utime, stime, start))
    (root / "uptime").write_text(f"{uptime:.2f} 0.00\n")
    return root


def test_a_stat_line_is_read_from_the_last_parenthesis():
    stat = proc_cpu.parse_stat(stat_line(42, "celery: (worker) 1", 7, 250, 50, 9000))
    assert (stat.pid, stat.name, stat.ppid) == (42, "celery: (worker) 1", 7)
    assert (stat.utime, stat.stime, stat.starttime) == (250, 50, 9000)
    assert stat.cpu_seconds == 300 / TICKS


def test_this_process_reads_as_the_kernel_counts_it():
    me = proc_cpu.read_stat(os.getpid())
    assert me is not None and me.ppid == os.getppid()
    before, spent = me.cpu_seconds, time.process_time()
    while time.process_time() - spent < 0.2:  # burn 0.2 s of CPU
        sum(range(1000))
    after = proc_cpu.read_stat(os.getpid())
    assert after is not None
    assert 0.15 <= after.cpu_seconds - before <= 0.2 + time.process_time() - spent
    assert proc_cpu.read_stat(2**22 + 12345) is None  # above pid_max: no such process


def test_a_meter_counts_the_window_and_processes_that_came_and_went(tmp_path):
    proc = tmp_path / "proc"
    window_start = 1000 * TICKS  # uptime 1000 s
    # 10: there before (200 ticks then), 11: there before, exits after the first sample.
    fake_proc(proc, {10: (1, 150, 50, 5), 11: (1, 100, 0, 5)}, uptime=1000)
    meter = proc_cpu.CpuMeter(proc=proc)
    meter.start([10, 11])
    assert meter.started_at == window_start and meter.seconds == 0
    # 10 spent 100 ticks more; 11 spent 30 more; 12 began inside the window with 40 ticks.
    fake_proc(
        proc,
        {10: (1, 200, 100, 5), 11: (1, 130, 0, 5), 12: (10, 30, 10, window_start + 50)},
        uptime=1001,
    )
    meter.sample([10, 11, 12])
    # 11 has exited: its last reading stands; 10 goes on.
    fake_proc(proc, {10: (1, 250, 150, 5), 12: (10, 30, 10, window_start + 50)}, uptime=1002)
    meter.sample([10, 11, 12])
    assert meter.seconds == pytest.approx((200 + 30 + 40) / TICKS)
    stats = proc_cpu.all_stats(proc)
    assert sorted(s.pid for s in stats) == [10, 12]
    assert sorted(proc_cpu.descendants(1, stats)) == [1, 10, 12]
    assert proc_cpu.descendants(12, stats) == [12]


def test_per_item_arithmetic():
    assert proc_cpu.ms_per_item(2.5, 1000) == 2.5
    assert proc_cpu.ms_per_item(0.36, 1000) == 0.36
    assert proc_cpu.per_item(4259, 1000) == 4.259
    assert math.isnan(proc_cpu.ms_per_item(1.0, 0)) and math.isnan(proc_cpu.per_item(3, 0))


def test_the_machines_busy_share(tmp_path):
    (tmp_path / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    before = proc_cpu.machine_ticks(tmp_path)
    assert before == (150, 1000)
    (tmp_path / "stat").write_text("cpu  250 0 100 850 50 0 0 0 0 0\n")
    after = proc_cpu.machine_ticks(tmp_path)
    assert proc_cpu.busy_share(before, after) == 200 / 250
