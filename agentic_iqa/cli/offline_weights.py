"""Say how to install weight files when their host cannot be reached (``tools download``).

A failed download is never replaced by a copy found on the disk: the user is told where copies
are and which command installs them, and chooses.  The repository's ``tests/data/pyiqa-weights``
holds NIQE's and BRISQUE's parameter files (a data folder named by ``AGENTIC_IQA_DATA_DIR``, or a
shared ``data`` folder beside the checkout, has the same layout); the package itself never reads
those folders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

#: The folder of the test data that holds weight files, and the files it holds.
DATA_WEIGHTS = "pyiqa-weights"
IN_TEST_DATA = frozenset({"niqe_modelparameters.mat", "brisque_svm_weights.pth"})
REPOSITORY_FOLDER = "tests/data/" + DATA_WEIGHTS


def candidate_folders(cwd: Path | None = None) -> list[Path]:
    """Folders that may hold the test data's weight files, in the order they are offered."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    checkout = Path(__file__).resolve().parents[2]
    places: list[Path] = []
    configured = os.environ.get("AGENTIC_IQA_DATA_DIR")
    if configured:
        places.append(Path(configured).expanduser() / DATA_WEIGHTS)
    places += [
        here / REPOSITORY_FOLDER,
        checkout / REPOSITORY_FOLDER,
        checkout.parent / "shared" / "data" / DATA_WEIGHTS,
    ]
    unique: list[Path] = []
    for place in places:
        resolved = place.resolve()
        if resolved not in unique:
            unique.append(resolved)
    return unique


def holding(files: Sequence[str], cwd: Path | None = None) -> Path | None:
    """The first candidate folder that holds every one of ``files``, if any."""
    for folder in candidate_folders(cwd):
        if all((folder / name).is_file() for name in files):
            return folder
    return None


def unreachable_hint(hosts: Sequence[str], files: Sequence[str], cwd: Path | None = None) -> str:
    """The lines to print when ``files`` could not be fetched because ``hosts`` were unreachable.

    Names the folder holding copies when one is found here, else where a clone of the repository
    has them; always names ``agentic-iqa tools install-weights DIR``.
    """
    lines = [
        f"The download failed because {', '.join(sorted(set(hosts)))} cannot be reached "
        "from this machine (offline, or a proxy or firewall in the way); nothing was installed "
        "in its place."
    ]
    known = [name for name in files if name in IN_TEST_DATA]
    others = [name for name in files if name not in IN_TEST_DATA]
    if known:
        folder = holding(known, cwd)
        if folder is not None:
            lines.append(
                f"{' and '.join(known)}: copies are in {folder}; install them with "
                f"`agentic-iqa tools install-weights {folder}`."
            )
        else:
            lines.append(
                f"{' and '.join(known)}: a clone of the agentic-iqa repository holds them in "
                f"{REPOSITORY_FOLDER} (or $AGENTIC_IQA_DATA_DIR/{DATA_WEIGHTS}); install them "
                f"with `agentic-iqa tools install-weights {REPOSITORY_FOLDER}`."
            )
    if others:
        lines.append(
            f"{', '.join(others)}: download on a machine with network, copy the files into a "
            "folder DIR here and run `agentic-iqa tools install-weights DIR`."
        )
    return "\n".join(lines)
