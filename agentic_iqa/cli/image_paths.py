"""The images ``tools run`` scores: files, folders and glob patterns, expanded in order.

A folder gives its image files sorted by name (the extensions a plain folder given to
``eval submit`` takes), subfolders only with ``recursive``; a quoted glob pattern is expanded
here, sorted, so ``'photos/*.jpg'`` works where no shell expands it (and ``**`` descends).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iqa_tools.storage import is_url

from ..jobs.manifest import IMAGE_EXTENSIONS

_GLOB_MAGIC = frozenset("*?[")


@dataclass(frozen=True)
class ImagePath:
    """One image to score, and the name its reference has under ``--reference-dir``."""

    location: str
    #: Path relative to the folder it was found in (a file's or a glob match's own name), so
    #: ``--reference-dir REFS`` pairs ``photos/a/b.png`` found in ``photos`` with ``REFS/a/b.png``.
    name: str


class NothingToScore(ValueError):
    """A PATH that gives no image: an empty folder, a glob matching nothing."""


def is_pattern(argument: str) -> bool:
    """Return whether ``argument`` is a glob we expand: it holds ``*``, ``?`` or ``[`` and names no
    existing file (a file really called ``a[1].png`` is taken as it is)."""
    return (
        bool(_GLOB_MAGIC & set(argument)) and not is_url(argument) and not os.path.exists(argument)
    )


def is_folder(argument: str) -> bool:
    return not is_url(argument) and os.path.isdir(argument)


def expand(arguments: Iterable[str], *, recursive: bool = False) -> list[ImagePath]:
    """Return every image the arguments name, in argument order, each file once.

    A path that does not exist is kept (scoring it says "file not found" in its row); a folder
    without images or a pattern matching no file raises :class:`NothingToScore`, as a shell's
    ``failglob`` would: it is almost always a typo.
    """
    found: list[ImagePath] = []
    seen: set[str] = set()
    for argument in arguments:
        if is_url(argument):
            images = [ImagePath(argument, argument.split("?")[0].rstrip("/").rsplit("/", 1)[-1])]
        elif is_folder(argument):
            try:
                images = _folder(Path(argument), recursive)
            except OSError as exc:
                raise NothingToScore(
                    f"folder {argument} cannot be listed: {exc.strerror or exc}"
                ) from exc
            if not images:
                where = "in or below" if recursive else "in"
                hint = "" if recursive else " (--recursive looks in subfolders too)"
                raise NothingToScore(
                    f"no image file ({', '.join(sorted(IMAGE_EXTENSIONS))}) "
                    f"{where} {argument}{hint}"
                )
        elif is_pattern(argument):
            matches = sorted(m for m in glob.glob(argument, recursive=True) if os.path.isfile(m))
            if not matches:
                raise NothingToScore(f"no file matches the pattern {argument!r}")
            images = [ImagePath(match, os.path.basename(match)) for match in matches]
        else:
            images = [ImagePath(argument, os.path.basename(argument))]
        for image in images:
            key = image.location if is_url(image.location) else os.path.realpath(image.location)
            if key not in seen:
                seen.add(key)
                found.append(image)
    return found


def _folder(folder: Path, recursive: bool) -> list[ImagePath]:
    candidates = folder.rglob("*") if recursive else folder.iterdir()
    images = sorted(
        path.relative_to(folder)
        for path in candidates
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()
    )
    return [ImagePath(str(folder / relative), relative.as_posix()) for relative in images]
