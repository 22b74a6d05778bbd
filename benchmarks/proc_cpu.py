"""Read processes' CPU time from /proc, and turn it into milliseconds per item.

Linux only.  ``/proc/<pid>/stat`` holds a process's user and system time in clock ticks
(fields 14 and 15, ``utime`` and ``stime``, every thread together); its parent (field 4) and
its start (field 22, ticks after boot) let a meter find a server's processes and tell one that
began inside the measured window (all its CPU counts) from one that was there before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` a meter needs; times in clock ticks."""

    pid: int
    name: str
    ppid: int
    utime: int
    stime: int
    starttime: int

    @property
    def cpu_seconds(self) -> float:
        return (self.utime + self.stime) / CLOCK_TICKS


def parse_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line.  The command name, in parentheses, may hold spaces
    and parentheses itself, so the fields are counted from the last ``)``."""
    pid, _, rest = text.partition(" (")
    name, _, tail = rest.rpartition(") ")
    fields = tail.split()  # fields[0] is field 3 (state)
    return ProcStat(
        pid=int(pid),
        name=name,
        ppid=int(fields[1]),
        utime=int(fields[11]),
        stime=int(fields[12]),
        starttime=int(fields[19]),
    )


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """``pid``'s stat, or None when it has exited."""
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def all_stats(proc: Path = PROC) -> list[ProcStat]:
    """Every process's stat (those that exit while being read are left out)."""
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name), proc)
            if stat is not None:
                found.append(stat)
    return found


def descendants(root: int, stats: Iterable[ProcStat]) -> list[int]:
    """``root`` and every process below it (children, their children...)."""
    below: dict[int, list[int]] = {}
    for stat in stats:
        below.setdefault(stat.ppid, []).append(stat.pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(below.get(pid, ()))
    return tree


def boot_ticks_now(proc: Path = PROC) -> int:
    """Clock ticks since boot now (``/proc/uptime``), on the scale of ``starttime``."""
    return int(float((proc / "uptime").read_text().split()[0]) * CLOCK_TICKS)


@dataclass
class CpuMeter:
    """CPU seconds a group of processes spent since :meth:`start`.

    Each :meth:`sample` names the group's processes now; a process seen for the first time
    counts from its CPU at :meth:`start` (read then, when it already ran) or from zero (when it
    began after).  A process that exits between two samples keeps its last reading: what it
    spent after that is lost, so sample often where processes come and go.
    """

    proc: Path = PROC
    started_at: int = 0
    before: dict[int, float] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)

    def start(self, pids: Iterable[int] = ()) -> None:
        self.started_at = boot_ticks_now(self.proc)
        self.before, self.last = {}, {}
        self.sample(pids)

    def sample(self, pids: Iterable[int]) -> None:
        for pid in pids:
            stat = read_stat(pid, self.proc)
            if stat is None:
                continue
            if pid not in self.before:
                self.before[pid] = stat.cpu_seconds if stat.starttime <= self.started_at else 0.0
            self.last[pid] = stat.cpu_seconds

    @property
    def seconds(self) -> float:
        return sum(self.last[pid] - self.before[pid] for pid in self.last)


def ms_per_item(seconds: float, items: int) -> float:
    """Milliseconds per item of ``seconds`` spent on ``items`` items (NaN for none)."""
    return 1000.0 * seconds / items if items > 0 else float("nan")


def per_item(delta: float, items: int) -> float:
    """``delta`` (rows, bytes, commands) per item (NaN for none)."""
    return delta / items if items > 0 else float("nan")


def machine_ticks(proc: Path = PROC) -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU since boot, from ``/proc/stat``: busy is all
    but idle and iowait, whoever spent it."""
    values = [int(v) for v in (proc / "stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])  # guest times are inside user and nice already
    return total - idle, total


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The machine's busy share between two :func:`machine_ticks` readings (0 to 1)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else float("nan")
