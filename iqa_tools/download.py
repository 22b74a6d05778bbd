"""Weights on demand: fetch the files a tool needs from the URLs in the tool metadata.

Nothing here runs unless a user asks (``agentic-iqa tools download TOOL``); tools never download
by themselves (``allow_downloads`` stays off).  A file is written to ``NAME.part`` next to its
destination and takes its final name only once it is complete and, where the metadata records a
``sha256``, once its hash matches, so a bad or half-written file never sits where a loader reads.
An interrupted download resumes from the ``.part`` file with an HTTP ``Range`` request; a server
that ignores ``Range`` (answers 200 with the whole file) is followed from the beginning.

Files go to the weights folder when one is set (``AGENTIC_IQA_WEIGHTS_DIR``, or ``--dir``), else
to the folder their loader reads (``torch.hub.get_dir()/pyiqa``, ``.../checkpoints``,
``.../clip``).  Hugging Face models (timm backbones, Q-Align) are not fetched here: they belong in
the Hugging Face cache, and the caller is told the command that fills it.

Standard library only (urllib, hashlib): importing this module costs nothing at start-up.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

from . import weights as weight_files
from .catalog import Catalog, ToolSpec, WeightFile
from .errors import ToolError
from .filecheck import content_problem

CHUNK_BYTES = 1 << 16
USER_AGENT = "agentic-iqa-weights/1"
#: Largest download taken when the metadata records no size: the biggest pyiqa weight file is
#: well under this; a server announcing more is not sending a weight file.
MAX_UNSIZED_BYTES = 8 << 30
#: Space left free on the disk after a download.
DISK_MARGIN_BYTES = 256 << 20
#: Called with (bytes on disk so far, total bytes or None when the server does not say).
Progress = Callable[[int, int | None], None]


class DownloadError(ToolError):
    """A weight file could not be fetched; the message is one line naming the file."""


class ChecksumError(DownloadError):
    """A fetched file's sha256 differs from the metadata's; the file was deleted."""


class UnreachableError(DownloadError):
    """The host serving a weight file could not be reached (no network, DNS, refused, timeout)."""

    def __init__(self, message: str, host: str) -> None:
        super().__init__(message)
        self.host = host


# -- what to fetch ---------------------------------------------------------------------------------


def paper_tools(catalog: Catalog) -> list[ToolSpec]:
    """The AgenticIQA paper's toolbox: every tool the metadata marks ``from_paper``."""
    return [spec for spec in catalog if spec.from_paper]


def licence_of(weight: WeightFile) -> str:
    return weight.licence or f"unknown, see {weight.url}"


def select_tools(catalog: Catalog, names: Sequence[str], paper: bool = False) -> list[ToolSpec]:
    """The tools to fetch weights for; a name that cannot be served is an error, said at once.

    Naming no tool without ``paper`` is an error too: the paper's toolbox is gigabytes, so it is
    fetched only when asked for.
    """
    if not names and not paper:
        raise DownloadError(
            "name the tools whose weights to fetch (e.g. `agentic-iqa tools download NIQE "
            "BRISQUE`), or pass --paper for the paper's whole toolbox"
        )
    chosen: dict[str, ToolSpec] = (
        {spec.name: spec for spec in paper_tools(catalog)} if paper else {}
    )
    for name in names:
        spec = catalog.get(name)  # UnknownToolError names the known tools
        if spec.weight_free:
            raise DownloadError(
                f"{spec.name} needs no weight files (it is weight-free): nothing to download"
            )
        if all(w.location == "hf_hub" for w in spec.weights):
            models = " ".join(w.file for w in spec.weights)
            raise DownloadError(
                f"{spec.name} needs only Hugging Face models, which this command does not fetch: "
                f"run `huggingface-cli download {models}` where there is network"
            )
        chosen.setdefault(spec.name, spec)
    return list(chosen.values())


@dataclass(frozen=True)
class FileTask:
    """One file to put in place, and the tools that need it."""

    weight: WeightFile
    tools: tuple[str, ...]
    destination: Path


@dataclass(frozen=True)
class HubModel:
    """A Hugging Face model the chosen tools need; fetched by the Hugging Face tools, not here."""

    repo: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    files: tuple[FileTask, ...]
    hub_models: tuple[HubModel, ...]


def plan(specs: Iterable[ToolSpec], directory: Path | None = None) -> Plan:
    """Where each needed file goes: ``directory`` (flat) if given, else its loader's folder.

    A file several tools share (a torchvision backbone) is fetched once.
    """
    files: dict[Path, tuple[WeightFile, list[str]]] = {}
    hub: dict[str, list[str]] = {}
    for spec in specs:
        for weight in spec.weights:
            if weight.location == "hf_hub":
                hub.setdefault(weight.file, []).append(spec.name)
                continue
            if not weight.url:
                raise DownloadError(
                    f"{spec.name}: the tool metadata records no URL for {weight.file}"
                )
            destination = weight_files.download_dir(weight, directory) / weight.file
            files.setdefault(destination, (weight, []))[1].append(spec.name)
    return Plan(
        tuple(FileTask(weight, tuple(tools), path) for path, (weight, tools) in files.items()),
        tuple(HubModel(repo, tuple(tools)) for repo, tools in hub.items()),
    )


# -- fetching --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """A file in place under its final name."""

    path: Path
    sha256: str
    size: int
    #: True only when the metadata records a sha256 and the file's hash equals it.
    verified: bool
    action: Literal["downloaded", "resumed", "present"]
    #: Set when a file already under the final name had the wrong hash and was replaced.
    replaced: bool = False


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def ensure(task: FileTask, *, progress: Progress | None = None, timeout: float = 60.0) -> Fetched:
    """Put ``task``'s file in place: keep a good copy already there, else fetch it.

    A copy already under the final name whose hash differs from the metadata's is fetched again
    and replaced only once the new copy checks out.
    """
    weight, destination = task.weight, task.destination
    replaced = False
    if destination.is_file():
        digest = sha256_of(destination)
        if weight.sha256 is not None and digest == weight.sha256:
            return Fetched(
                destination, digest, destination.stat().st_size, verified=True, action="present"
            )
        if weight.sha256 is None and content_problem(destination) is None:
            return Fetched(
                destination, digest, destination.stat().st_size, verified=False, action="present"
            )
        replaced = True  # a wrong hash, or a page or a truncated file under the final name
    assert weight.url is not None  # plan() refuses files without a URL
    fetched = fetch(
        weight.url,
        destination,
        sha256=weight.sha256,
        progress=progress,
        timeout=timeout,
        size=weight.size,
    )
    return replace(fetched, replaced=replaced)


def fetch(
    url: str,
    destination: Path,
    *,
    sha256: str | None = None,
    progress: Progress | None = None,
    timeout: float = 60.0,
    size: int | None = None,
) -> Fetched:
    """Download ``url`` to ``destination`` through ``destination.part``, resuming that file.

    The size the server announces is checked before a byte is written (against ``size`` when
    the metadata knows it, else against :data:`MAX_UNSIZED_BYTES`, and against the free disk
    space); without a ``sha256`` the file's form is checked at the end
    (:func:`.filecheck.content_problem`): a web page or a truncated file is never put in place.
    """
    name = destination.name
    destination.parent.mkdir(parents=True, exist_ok=True)
    part = destination.with_name(name + ".part")
    offset = part.stat().st_size if part.is_file() else 0
    response, offset, total = _open(url, part, offset, timeout)
    if response is not None:
        try:
            _check_size(name, url, destination.parent, offset, total, size)
        except DownloadError:
            response.close()
            raise
    digest = hashlib.sha256()
    if offset:
        with part.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    done = offset
    if response is not None:  # None: the .part file already held the whole file
        if progress is not None:
            progress(done, total)
        try:
            with response, part.open("ab" if offset else "wb") as sink:
                while chunk := response.read(CHUNK_BYTES):
                    sink.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
        except (OSError, http.client.HTTPException) as exc:
            raise DownloadError(
                f"{name}: download from {url} stopped after {done} of {total or '?'} bytes "
                f"({type(exc).__name__}: {exc}); run the same command again to resume"
            ) from None
        if total is not None and done != total:
            raise DownloadError(
                f"{name}: download from {url} stopped after {done} of {total} "
                "bytes (the connection closed early); run the same command "
                "again to resume"
            )
    found = digest.hexdigest()
    if sha256 is not None and found != sha256:
        part.unlink(missing_ok=True)
        raise ChecksumError(
            f"{name}: sha256 mismatch (expected {sha256}, got {found}) for "
            f"{url}; the downloaded file was deleted"
        )
    if size is not None and done != size:
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"{name}: {done} bytes came from {url}, the metadata says {size}; "
            "the downloaded file was deleted"
        )
    if sha256 is None:
        problem = _problem_as(part, name)
        if problem is not None:
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"{name}: what {url} sent is not the file: {problem}; the "
                "downloaded file was deleted"
            )
    os.replace(part, destination)
    return Fetched(
        destination,
        found,
        destination.stat().st_size,
        verified=sha256 is not None,
        action="resumed" if offset else "downloaded",
    )


def _problem_as(part: Path, name: str) -> str | None:
    """:func:`content_problem` of the ``.part`` file, judged by the final name's suffix."""
    staged = part.with_name(name + ".check" + Path(name).suffix)
    os.replace(part, staged)
    try:
        return content_problem(staged)
    finally:
        os.replace(staged, part)


def _check_size(
    name: str, url: str, folder: Path, offset: int, total: int | None, size: int | None
) -> None:
    """Refuse a download whose announced size is not the file's, or that cannot fit."""
    if size is not None and total is not None and total != size:
        raise DownloadError(
            f"{name}: {url} announces {total} bytes, the metadata says {size}: "
            "not the file; nothing was written"
        )
    if size is None and total is not None and total > MAX_UNSIZED_BYTES:
        raise DownloadError(
            f"{name}: {url} announces {total / 2**30:.1f} GiB, more than any "
            f"weight file ({MAX_UNSIZED_BYTES / 2**30:.0f} GiB at most): not "
            "the file; nothing was written"
        )
    needed = (total if total is not None else size or 0) - offset
    free = shutil.disk_usage(folder).free
    if needed > 0 and needed + DISK_MARGIN_BYTES > free:
        raise DownloadError(
            f"{name}: {needed / 2**20:.0f} MiB to download and only "
            f"{free / 2**20:.0f} MiB free in {folder}: free some space or "
            "choose another folder (--dir)"
        )


def _open(
    url: str, part: Path, offset: int, timeout: float
) -> tuple[http.client.HTTPResponse | None, int, int | None]:
    """The response to read, the offset it starts at (0: the whole file) and the total size."""
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    name = part.name.removesuffix(".part")
    try:
        response = urlopen(Request(url, headers=headers), timeout=timeout)  # noqa: S310
    except HTTPError as exc:
        content_range = exc.headers.get("Content-Range") if exc.headers else None
        exc.close()
        if exc.code == 416 and offset:
            # Nothing left to send from there: either the .part file is complete, or it is
            # longer than the file (a different file), so it is dropped and fetched again.
            if _range_total(content_range) == offset:
                return None, offset, offset
            part.unlink(missing_ok=True)
            return _open(url, part, 0, timeout)
        raise DownloadError(f"{name}: HTTP {exc.code} {exc.reason} from {url}") from None
    except (URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, URLError) else f"{type(exc).__name__}: {exc}"
        host = urlsplit(url).netloc or url
        raise UnreachableError(
            f"{name}: download from {url} failed: the host {host} cannot be reached ({reason})",
            host,
        ) from None
    except http.client.HTTPException as exc:
        raise DownloadError(f"{name}: cannot download {url}: {type(exc).__name__}: {exc}") from None
    length_header = response.headers.get("Content-Length", "")
    length = int(length_header) if length_header.isdigit() else None
    if offset and response.status == 206:
        start, total = _content_range(response.headers.get("Content-Range"))
        if start == offset:
            if total is None and length is not None:
                total = offset + length
            return response, offset, total
        response.close()  # a part we did not ask for: start again from the beginning
        part.unlink(missing_ok=True)
        return _open(url, part, 0, timeout)
    # 200: the whole file, also from a server that ignored the Range header
    return response, 0, length


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) of ``bytes START-END/TOTAL``; None where absent or '*'."""
    match = re.fullmatch(r"\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*", value or "")
    if match is None:
        return None, None
    total = match.group(2)
    return int(match.group(1)), None if total == "*" else int(total)


def _range_total(value: str | None) -> int | None:
    """The size in a 416 answer's ``bytes */TOTAL``."""
    match = re.fullmatch(r"\s*bytes\s+\*/(\d+)\s*", value or "")
    return int(match.group(1)) if match else None
