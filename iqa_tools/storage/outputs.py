"""Write outputs where the user asked: a path on this machine, or a URL in a store.

A report, an export or a folder of figures meant for ``s3://...`` is written to a temporary
file or folder first and uploaded when the block ends without an error, so it lands where the
user asked even from a machine whose disk no one else sees.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from .access import admit
from .locations import join_under, local_path
from .reads import remote_filesystem
from .retry import call_with_retries


def upload(source: str | os.PathLike[str], location: str) -> None:
    """Put the local file ``source`` at the URL ``location`` (one object, replaced whole: a
    reader sees the old object or the new one), with the retry and error rules of reads."""
    admit(location)
    fs, target = remote_filesystem(location)
    call_with_retries(location, lambda: fs.put_file(os.fspath(source), target))


@contextmanager
def output_file(location: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield where to write an output meant for ``location``: the path itself on this machine; for
    a store's URL a temporary file, uploaded when the block ends without an error (so a
    report or an export lands where the user asked, even from a machine whose disk no one
    else sees)."""
    text = os.fspath(location)
    local = local_path(text)
    if local is not None:
        yield Path(local)
        return
    admit(text)
    remote_filesystem(text)  # an unusable URL fails before anything is computed
    with tempfile.TemporaryDirectory(prefix="agentic-iqa-out-") as scratch:
        staged = Path(scratch) / (PurePosixPath(urlsplit(text).path).name or "output")
        yield staged
        upload(staged, text)


@contextmanager
def output_folder(location: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a folder for outputs meant for ``location``, as :func:`output_file` does a file: each
    file written under it is uploaded under the URL ``location`` (``--figures
    s3://bucket/paper/``)."""
    text = os.fspath(location)
    local = local_path(text)
    if local is not None:
        yield Path(local)
        return
    admit(text)
    remote_filesystem(text)
    with tempfile.TemporaryDirectory(prefix="agentic-iqa-out-") as scratch:
        yield Path(scratch)
        for path in sorted(Path(scratch).rglob("*")):
            if path.is_file():
                upload(path, join_under(text, path.relative_to(scratch).as_posix()))
