"""Hostile dataset files through `eval submit`: lines of output, peak RSS and seconds.

Each probe is built once in a temporary folder and submitted by a child process (a fresh
SQLite database each time) under a wall-clock limit and a resident-memory limit (polled; an
address-space limit would also stop torch, which reserves far more than it uses), so a bomb
that the checkout under test does not stop is killed, not left to take the machine.  With
``--before DIR`` the same probes also run against another checkout (a git worktree of an older
commit), and the table shows both:

    git worktree add /tmp/head-wt HEAD
    .venv/bin/python benchmarks/hostile_inputs.py --before /tmp/head-wt
    git worktree remove --force /tmp/head-wt

Probes: an XLSX of 60 million shared strings in 2.5 MB (SPAQ), and XLSX files whose parts
(five million shared strings in a part named otherwise, three million cell formats, a row of
eight million cells, two million rows with heights) are counted by element (issue 41); a MAT
file with a compressed 4 GB array in 4 MB (LIVE-C); a JSONL line nested 200,000 deep; a NUL
byte in a CSV manifest's image path; a KonIQ-10k name that climbs out of --root.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.io import savemat

REPO = Path(__file__).resolve().parents[1]
SST_ITEM = b"<si><t>a</t></si>"


def _image(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(path)


def xlsx_bomb(root: Path, strings: int = 60_000_000) -> list[str]:
    """SPAQ's spreadsheet whose shared-strings part lists ``strings`` strings."""
    from openpyxl import Workbook

    plain = root / "plain.xlsx"
    workbook = Workbook()
    workbook.active.append(["Image name", "MOS"])
    workbook.active.append(["a.png", 50.0])
    workbook.save(plain)
    target = root / "Annotations" / "MOS and Image attribute scores.xlsx"
    target.parent.mkdir(parents=True)
    with (
        zipfile.ZipFile(plain) as source,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive,
    ):
        for item in source.infolist():  # openpyxl writes inline strings: declare the part
            data = source.read(item)
            if item.filename == "[Content_Types].xml":
                data = data.replace(
                    b"</Types>",
                    b'<Override PartName="/xl/sharedStrings.xml" '
                    b'ContentType="application/vnd.openxmlformats-'
                    b'officedocument.spreadsheetml.sharedStrings+xml" /></Types>',
                )
            archive.writestr(item, data)
        with archive.open("xl/sharedStrings.xml", "w", force_zip64=True) as part:
            part.write(
                b'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.'
                b'openxmlformats.org/spreadsheetml/2006/main" count="%d" '
                b'uniqueCount="%d">' % (strings, strings)
            )
            block = SST_ITEM * 100_000
            for _ in range(strings // 100_000):
                part.write(block)
            part.write(b"</sst>")
    plain.unlink()
    return ["--dataset", "spaq", "--root", str(root)]


MAIN_NS = b'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
SST_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"


def _spaq_rewritten(
    root: Path,
    part: str,
    head: bytes,
    item: bytes,
    count: int,
    tail: bytes,
    content_type: str | None = None,
) -> list[str]:
    """SPAQ's spreadsheet with ``part`` replaced by ``head + item * count + tail`` (declared
    with ``content_type`` when given)."""
    from openpyxl import Workbook

    plain = root / "plain.xlsx"
    workbook = Workbook()
    workbook.active.append(["Image name", "MOS"])
    workbook.active.append(["a.png", 50.0])
    workbook.save(plain)
    target = root / "Annotations" / "MOS and Image attribute scores.xlsx"
    target.parent.mkdir(parents=True)
    with (
        zipfile.ZipFile(plain) as source,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive,
    ):
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename == "[Content_Types].xml" and content_type:
                data = data.replace(
                    b"</Types>",
                    f'<Override PartName="/{part}" ContentType='
                    f'"{content_type}" /></Types>'.encode(),
                )
            if entry.filename != part:
                archive.writestr(entry, data)
        with archive.open(part, "w", force_zip64=True) as written:
            written.write(head)
            block = item * 100_000
            for _ in range(count // 100_000):
                written.write(block)
            written.write(tail)
    plain.unlink()
    return ["--dataset", "spaq", "--root", str(root)]


def xlsx_renamed_strings(root: Path) -> list[str]:
    """Five million empty shared strings in a part not named sharedStrings.xml."""
    return _spaq_rewritten(
        root, "xl/strings.xml", b"<sst " + MAIN_NS + b">", b"<si/>", 5_000_000, b"</sst>", SST_TYPE
    )


def xlsx_styles(root: Path) -> list[str]:
    """A stylesheet of three million cell formats."""
    return _spaq_rewritten(
        root,
        "xl/styles.xml",
        b"<styleSheet " + MAIN_NS + b"><cellXfs>",
        b"<xf/>",
        3_000_000,
        b"</cellXfs></styleSheet>",
    )


def xlsx_wide_row(root: Path) -> list[str]:
    """A sheet whose one row holds eight million cells."""
    return _spaq_rewritten(
        root,
        "xl/worksheets/sheet1.xml",
        b"<worksheet " + MAIN_NS + b"><sheetData><row>",
        b"<c/>",
        8_000_000,
        b"</row></sheetData></worksheet>",
    )


def xlsx_row_heights(root: Path) -> list[str]:
    """A sheet of two million empty rows below the header, each with a height."""
    header = (
        b'<row><c t="inlineStr"><is><t>Image name</t></is></c>'
        b'<c t="inlineStr"><is><t>MOS</t></is></c></row>'
    )
    return _spaq_rewritten(
        root,
        "xl/worksheets/sheet1.xml",
        b"<worksheet " + MAIN_NS + b"><sheetData>" + header,
        b'<row ht="9" customHeight="1"/>',
        2_000_000,
        b"</sheetData></worksheet>",
    )


def mat_bomb(root: Path) -> list[str]:
    """LIVE-C's MOS file holding one compressed double array of 4 GB (1 x 2**29 - 16)."""
    names = np.empty((8, 1), dtype=object)
    for index in range(8):
        names[index, 0] = np.array([f"t{index}.bmp"])
    (root / "Data").mkdir(parents=True)
    savemat(root / "Data" / "AllImages_release.mat", {"AllImages_release": names})
    count, name = 2**29 - 16, b"AllMOS_release"  # 4 GB, and its sizes still fit 32 bits
    head = (
        struct.pack("<II", 6, 8)
        + struct.pack("<II", 6, 0)
        + struct.pack("<II", 5, 8)
        + struct.pack("<ii", 1, count)
        + struct.pack("<II", 1, len(name))
        + name
        + b"\0" * (-len(name) % 8)
        + struct.pack("<II", 9, 8 * count)
    )
    packer = zlib.compressobj(9)
    packed = [packer.compress(struct.pack("<II", 14, len(head) + 8 * count) + head)]
    zeros = bytes(2**24)
    packed += [packer.compress(zeros) for _ in range(8 * count // len(zeros))]
    packed.append(packer.compress(bytes(8 * count % len(zeros))))
    packed.append(packer.flush())
    body = b"".join(packed)
    header = b"MATLAB 5.0 MAT-file, probe".ljust(116) + b"\0" * 8 + struct.pack("<H", 0x0100)
    (root / "Data" / "AllMOS_release.mat").write_bytes(
        header + b"IM" + struct.pack("<II", 15, len(body)) + body
    )
    return ["--dataset", "livec", "--root", str(root), "--split", "with-training"]


def deep_jsonl(root: Path) -> list[str]:
    _image(root / "a.png")
    path = root / "m.jsonl"
    path.write_text('{"image": "a.png"}\n{"image": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    return [str(path)]


def nul_csv(root: Path) -> list[str]:
    _image(root / "a.png")
    path = root / "m.csv"
    path.write_bytes(b"image\na.png\na\x00b.png\n")
    return [str(path)]


def koniq_escape(root: Path) -> list[str]:
    _image(root.parent / "outside" / "secret.png")
    (root / "koniq10k_scores_and_distributions.csv").write_text(
        "image_name,MOS\n../../outside/secret.png,3.5\n"
    )
    return ["--dataset", "koniq", "--root", str(root)]


PROBES = {
    "xlsx bomb (2.5 MB, 60M strings)": xlsx_bomb,
    "xlsx, 5M strings in a renamed part": xlsx_renamed_strings,
    "xlsx, 3M cell formats": xlsx_styles,
    "xlsx, a row of 8M cells": xlsx_wide_row,
    "xlsx, 2M rows with heights": xlsx_row_heights,
    "MAT bomb (4 GB array)": mat_bomb,
    "JSONL line 200,000 deep": deep_jsonl,
    "NUL in a CSV image path": nul_csv,
    "KonIQ name ../../outside": koniq_escape,
}


def _resident(pid: int) -> int:
    """Resident bytes of a running process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(
    checkout: Path, args: list[str], folder: Path, timeout: float, memory: int
) -> tuple[str, str, str, str]:
    """(exit code, lines of output, peak RSS in MB, seconds) of one submit in ``checkout``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{folder / f'{time.monotonic_ns()}.db'}",
    }
    env.pop("AGENTIC_IQA_BROKER_URL", None)

    output = folder / "output.txt"
    started = time.monotonic()
    with output.open("wb") as sink:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentic_iqa",
                "eval",
                "submit",
                *args,
                "--mode",
                "tools",
                "--tools",
                "PIQE",
            ],
            cwd=checkout,
            env=env,
            stdout=sink,
            stderr=sink,
        )
        killed = ""
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout:
                killed = f"killed at {timeout:.0f} s"
            elif _resident(child.pid) > memory:
                killed = f"killed at {memory / 2**30:.0f} GB"
            if killed:
                child.kill()
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.05)
    seconds = time.monotonic() - started
    code = killed or str(os.waitstatus_to_exitcode(status))
    lines = len(output.read_bytes().splitlines())
    return code, str(lines), f"{usage.ru_maxrss / 1024:.0f}", f"{seconds:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="an older checkout to compare with")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per submit")
    parser.add_argument("--memory-gb", type=float, default=3.0, help="resident memory cap")
    options = parser.parse_args()
    memory = int(options.memory_gb * 2**30)
    checkouts = {"before": options.before, "after": REPO} if options.before else {"after": REPO}
    print(
        "| probe | file | "
        + " | ".join(f"{name}: exit, lines, RSS MB, s" for name in checkouts)
        + " |"
    )
    print("|---|---|" + "---|" * len(checkouts))
    with tempfile.TemporaryDirectory() as scratch:
        for title, build in PROBES.items():
            folder = Path(scratch) / build.__name__
            (folder / "data").mkdir(parents=True)
            args = build(folder / "data")
            size = sum(
                path.stat().st_size for path in (folder / "data").rglob("*") if path.is_file()
            )
            cells = [
                ", ".join(run(checkout, args, folder, options.timeout, memory))
                for checkout in checkouts.values()
            ]
            print(f"| {title} | {size / 2**20:.1f} MB | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
