"""Where weight files live, whether a tool can run here, and how to put weights in place.

pyiqa fetches weights on first use into ``torch.hub.get_dir()/pyiqa`` (torchvision backbones
into ``torch.hub.get_dir()/checkpoints``, CLIP into ``torch.hub.get_dir()/clip``, timm backbones
and Q-Align from the Hugging Face hub).  On an air-gapped GPU cluster that first use fails,
often after long retries.
We answer "can this tool run here?" from the file system alone, without importing torch, and say
exactly which file is missing and where it goes.  Users fetch them on demand with
``agentic-iqa tools download TOOL`` (:mod:`iqa_tools.download`), copy a folder of them once with
``agentic-iqa tools install-weights DIR``, or point ``AGENTIC_IQA_WEIGHTS_DIR`` at a folder of them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .catalog import Catalog, ToolSpec, WeightFile


def torch_hub_dir() -> Path:
    """What ``torch.hub.get_dir()`` returns, computed without importing torch."""
    if os.environ.get("TORCH_HOME"):
        return Path(os.environ["TORCH_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "torch" / "hub"


def hf_hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home).expanduser() / "hub"


def location_dir(location: str) -> Path:
    """The folder the loader for ``location`` reads from."""
    if location == "pyiqa":
        return torch_hub_dir() / "pyiqa"
    if location == "torch_hub":
        return torch_hub_dir() / "checkpoints"
    if location == "clip":
        # pyiqa ships its own CLIP loader, which caches here (not in ~/.cache/clip).
        return torch_hub_dir() / "clip"
    if location == "hf_hub":
        return hf_hub_cache()
    raise ValueError(f"unknown weight location {location!r}")


def expected_path(weight: WeightFile) -> Path:
    if weight.location == "hf_hub":
        return hf_hub_cache() / ("models--" + weight.file.replace("/", "--"))
    return location_dir(weight.location) / weight.file


def _present(path: Path, weight: WeightFile) -> bool:
    """The file is there and, where no sha256 vouches for it, has its format's form: a web
    page or a truncated file saved under the weight's name is not a weight file."""
    if weight.location == "hf_hub":
        snapshots = path / "snapshots"
        return snapshots.is_dir() and any(snapshots.iterdir())
    if not (path.is_file() and path.stat().st_size > 0):
        return False
    from .filecheck import content_problem

    return content_problem(path) is None


Status = Literal["weight-free", "ready", "downloadable", "missing"]


@dataclass(frozen=True)
class Availability:
    """Whether a tool can run on this machine, and if not, what to do about it."""

    tool: str
    status: Status
    found: dict[str, Path] = field(default_factory=dict)
    missing: tuple[WeightFile, ...] = ()
    missing_packages: tuple[str, ...] = ()
    #: The weights folder setting the check ran with (where ``tools download`` puts files).
    weights_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status != "missing"

    @property
    def summary(self) -> str:
        """One short line for tables: what is there, or the names of what is missing."""
        if self.status == "weight-free":
            return "yes (weight-free)"
        if self.status == "ready":
            return "yes"
        names = [f"pip {p}" for p in self.missing_packages] + [
            f"HF {w.file}" if w.location == "hf_hub" else w.file for w in self.missing
        ]
        prefix = "downloads on first use" if self.status == "downloadable" else "no, needs"
        return f"{prefix}: {', '.join(names)}"

    @property
    def detail(self) -> str:
        if self.missing_packages:
            packages = " ".join(self.missing_packages)
            needs = f"needs Python package(s) {packages} (pip install {packages})"
            if not self.missing:
                return needs
            return needs + "; " + missing_files_message(self.tool, self.missing, self.weights_dir)
        if self.status == "weight-free":
            return "available (weight-free)"
        if self.status == "ready":
            return "available (weights found)"
        if self.status == "downloadable":
            return "weights will be downloaded on first use: " + ", ".join(
                w.file for w in self.missing
            )
        return missing_files_message(self.tool, self.missing, self.weights_dir)


def download_dir(weight: WeightFile, weights_dir: Path | None) -> Path:
    """Where a fetched file goes: the weights folder when one is set, else its loader's cache."""
    if weights_dir is not None and weight.location != "hf_hub":
        return weights_dir
    return expected_path(weight).parent


def missing_files_message(
    tool: str, missing: tuple[WeightFile, ...], weights_dir: Path | None = None
) -> str:
    """One line: the missing files, the command that fetches them and the folder they go in."""
    files = [w for w in missing if w.location != "hf_hub"]
    parts: list[str] = []
    if files:
        names = " and ".join(w.file for w in files)
        folders = " and ".join(dict.fromkeys(str(download_dir(w, weights_dir)) for w in files))
        them = "it" if len(files) == 1 else "them"
        alternatives = (
            f"copy {them} there"
            if weights_dir is not None
            else (
                f"copy {them} there, e.g. with `agentic-iqa tools install-weights DIR`, or set "
                f"AGENTIC_IQA_WEIGHTS_DIR to a folder holding {them}"
            )
        )
        parts.append(
            f"missing {names}: run `agentic-iqa tools download {tool}` to fetch {them} "
            f"into {folders} (or {alternatives})"
        )
    parts += [missing_message(w) for w in missing if w.location == "hf_hub"]
    return "; ".join(parts)


def missing_message(weight: WeightFile) -> str:
    where = expected_path(weight)
    if weight.location == "hf_hub":
        return (
            f"needs Hugging Face model {weight.file} in {hf_hub_cache()} "
            f"(run `huggingface-cli download {weight.file}` where there is network, "
            "then copy the hub cache folder)"
        )
    source = f" from {weight.url}" if weight.url else ""
    return (
        f"missing {weight.file}{source}: put it in {where.parent} "
        "(`agentic-iqa tools download`, `agentic-iqa tools install-weights DIR`) "
        "or in AGENTIC_IQA_WEIGHTS_DIR"
    )


def find_weight(weight: WeightFile, weights_dir: Path | None) -> Path | None:
    """The weights folder first (it is the user's explicit choice), then the loader's cache."""
    if weights_dir is not None and weight.location != "hf_hub":
        candidate = weights_dir / weight.file
        if _present(candidate, weight):
            return candidate
    path = expected_path(weight)
    return path if _present(path, weight) else None


def check(spec: ToolSpec, weights_dir: Path | None, allow_downloads: bool) -> Availability:
    absent = tuple(p for p in spec.python_packages if importlib.util.find_spec(p) is None)
    if absent:
        return Availability(
            spec.name,
            "missing",
            missing_packages=absent,
            missing=tuple(w for w in spec.weights if find_weight(w, weights_dir) is None),
            weights_dir=weights_dir,
        )
    if spec.weight_free:
        return Availability(spec.name, "weight-free")
    found: dict[str, Path] = {}
    missing: list[WeightFile] = []
    for weight in spec.weights:
        path = find_weight(weight, weights_dir)
        if path is None:
            missing.append(weight)
        else:
            found[weight.file] = path
    if not missing:
        return Availability(spec.name, "ready", found)
    status: Status = "downloadable" if allow_downloads else "missing"
    return Availability(spec.name, status, found, tuple(missing), weights_dir=weights_dir)


def stage(availability: Availability, spec: ToolSpec) -> None:
    """Link files found in the weights folder to where their loader reads them.

    pyiqa loads backbones and auxiliary files from fixed folders, so a file that only sits in
    ``AGENTIC_IQA_WEIGHTS_DIR`` is linked (or copied, where links are refused) into place.
    """
    for weight in spec.weights:
        source = availability.found.get(weight.file)
        if source is None or weight.location == "hf_hub":
            continue
        target = expected_path(weight)
        if target.exists() or source == target:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.symlink_to(source.resolve())
        except OSError:
            shutil.copy2(source, target)


@dataclass(frozen=True)
class InstalledFile:
    file: str
    destination: Path
    copied: bool  # False when an identical file was already there


def install_weights(source_dir: Path, catalog: Catalog) -> tuple[list[InstalledFile], list[str]]:
    """Copy every known weight file found in ``source_dir`` to where pyiqa loads it.

    Returns the files installed and the names in ``source_dir`` that no tool needs.
    """
    if not source_dir.is_dir():
        raise NotADirectoryError(f"{source_dir} is not a folder")
    known: dict[str, WeightFile] = {
        weight.file: weight
        for spec in catalog
        for weight in spec.weights
        if weight.location != "hf_hub"
    }
    installed: list[InstalledFile] = []
    unknown: list[str] = []
    for entry in sorted(source_dir.iterdir()):
        weight = known.get(entry.name)
        if weight is None or not entry.is_file():
            unknown.append(entry.name)
            continue
        destination = expected_path(weight)
        same = destination.is_file() and destination.stat().st_size == entry.stat().st_size
        if not same:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(entry, destination)
        installed.append(InstalledFile(entry.name, destination, copied=not same))
    return installed, unknown
