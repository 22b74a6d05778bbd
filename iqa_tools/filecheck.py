"""Check that a weight file is what its name says, and whole, where no sha256 is recorded.

A download that answers with a web page (a login wall, a moved file, a rate-limit notice) or is
cut short without a Content-Length must never sit where a loader reads it and be reported as in
place: every item would then fail with an ``UnpicklingError``.  Where no hash can vouch for a
file, its form is checked instead, from its first bytes and, where the format says where it
ends, its end: a PyTorch checkpoint is a zip archive (its central directory at the very end) or
a pickle; a MATLAB 5 file is a header and a chain of tagged elements that must end at the end of
the file; NumPy and zip files have their own signatures.

Standard library only, and cheap (a few hundred bytes read, a zip directory located): called
for every file whenever availability is asked.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

_PAGE_STARTS = (b"<!doctype", b"<html", b"<?xml", b"<head", b"<body", b'{"error', b'{"message')
_TORCH = {".pth", ".pt", ".ckpt", ".bin", ".tar"}
_MAT_HEADER = 128
_MI_COMPRESSED = 15


def content_problem(path: Path) -> str | None:
    """Why ``path`` cannot be the weight file its name says; None when it looks whole."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(512)
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if size == 0:
        return "it is empty"
    if head.lstrip().lower().startswith(_PAGE_STARTS):
        return (
            "it is a web page (HTML, XML or a JSON error), not a weight file: the server "
            "answered with a page instead of the file"
        )
    suffix = path.suffix.lower()
    if suffix in _TORCH:
        if head.startswith(b"PK\x03\x04"):
            return (
                None
                if zipfile.is_zipfile(path)
                else "it is a truncated zip archive (a PyTorch checkpoint cut short)"
            )
        if head[:1] == b"\x80":  # a pickle (the legacy PyTorch format)
            return None
        return "it is neither a PyTorch zip checkpoint nor a pickle"
    if suffix == ".mat":
        return _mat_problem(path, head, size)
    if suffix == ".npy":
        return None if head.startswith(b"\x93NUMPY") else "it is not a NumPy .npy file"
    if suffix in {".npz", ".zip"}:
        return None if zipfile.is_zipfile(path) else "it is not a whole zip archive"
    if suffix == ".pkl":
        return None if head[:1] == b"\x80" else "it is not a pickle"
    return None


def _mat_problem(path: Path, head: bytes, size: int) -> str | None:
    if head.startswith(b"\x89HDF\r\n\x1a\n"):  # MATLAB 7.3 files are HDF5
        return None
    if not head.startswith(b"MATLAB 5.0 MAT-file") or size < _MAT_HEADER:
        return "it is not a MATLAB .mat file"
    endian = "<" if head[126:128] == b"IM" else ">"
    offset = _MAT_HEADER
    with path.open("rb") as handle:
        while offset < size:
            handle.seek(offset)
            tag = handle.read(8)
            if len(tag) < 8:
                return "it is a truncated MATLAB file (a data element's tag is cut)"
            kind, length = struct.unpack(endian + "II", tag)
            if kind >> 16:  # small data element: type and size in the first four bytes
                offset += 8
                continue
            end = offset + 8 + length
            if end > size:
                return (
                    f"it is a truncated MATLAB file (an element of {length} bytes at "
                    f"{offset} runs past the end, {size} bytes)"
                )
            padding = 0 if kind == _MI_COMPRESSED else (-length) % 8
            offset = end + padding
    return None


__all__ = ["content_problem"]
