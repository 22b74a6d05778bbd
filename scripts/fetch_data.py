"""Complete the test data: the LIVE-C photos the repository does not hold, laid out as
``tests/data`` is, and checked against ``tests/data/checksums.json``.

The repository holds what the tests read (``tests/data/README.md``): all of ``livec-dev``,
``tid2013-calibration`` and ``pyiqa-weights``, and the first 20 of the 200 ``livec-extra``
photos.  This script makes a folder with all of it, for ``AGENTIC_IQA_DATA_DIR`` (the studies
and benchmarks read the whole of ``livec-extra``):

1. copies the three complete sets from ``tests/data``;
2. makes ``livec-extra`` from the LIVE In the Wild Image Quality Challenge Database's release,
   ``ChallengeDB_release.zip`` (https://live.ece.utexas.edu/research/ChallengeDB/index.html):
   each photo's BMP from the release's ``Images/``, written losslessly as PNG, its MOS and
   standard deviation from ``Data/AllMOS_release.mat`` and ``Data/AllStdDev_release.mat``,
   checked against the values recorded here;
3. with ``--full``, also unpacks the whole release as ``ChallengeDB_release/`` (1,162 photos and
   7 training images; ``--dataset livec --root DIR/ChallengeDB_release`` reads it);
4. checks every file the tests and studies read (count, SHA-256; a PNG that is not byte-identical
   passes if its decoded pixels are) and prints the ``export AGENTIC_IQA_DATA_DIR=...`` line.

The release is not fetched without being asked: LIVE-C's page links to its download, which may
need a browser.  Download ``ChallengeDB_release.zip`` there and give it with ``--archive``
(a zip, or the folder it unpacks to); ``--url`` downloads it from a URL you trust instead.
Whatever the source, step 4 decides whether the result is the data the tests were written on.

    python scripts/fetch_data.py --into ~/iqa-data --archive ~/Downloads/ChallengeDB_release.zip
    python scripts/fetch_data.py --into ~/iqa-data --archive ... --full
    python scripts/fetch_data.py --check ~/iqa-data            # check a folder, change nothing
    python scripts/fetch_data.py --check tests/data            # the repository's part of it

Maintainers: ``--write-checksums FULL_COPY`` records a complete, trusted copy's files in
``tests/data/checksums.json``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import sys
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import typer

REPO = Path(__file__).resolve().parent.parent
IN_REPOSITORY = REPO / "tests" / "data"
CHECKSUMS = IN_REPOSITORY / "checksums.json"
LIVEC_PAGE = "https://live.ece.utexas.edu/research/ChallengeDB/index.html"
ARCHIVE = "ChallengeDB_release.zip"
RELEASE = "ChallengeDB_release"
NAMES_MAT, MOS_MAT, STD_MAT = (
    "Data/AllImages_release.mat",
    "Data/AllMOS_release.mat",
    "Data/AllStdDev_release.mat",
)
#: Sets the repository holds whole: copied from tests/data, never downloaded.
COPIED = ("livec-dev", "tid2013-calibration", "pyiqa-weights")
#: Sets of photos with a mos.csv (image, mos, mos_std) and images/.
PHOTO_SETS = ("livec-dev", "livec-extra")
#: The recorded MOS has four decimals.
MOS_TOLERANCE = 6e-5


class DataError(Exception):
    """What went wrong, in words for the user."""


def default_folder() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "agentic-iqa" / "data"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pixels_of(data: bytes) -> str:
    """SHA-256 of an image's decoded 8-bit RGB pixels, its size first: equal for a BMP and
    the PNG made from it, whatever the PNG encoder."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        return sha256_of(f"{rgb.width}x{rgb.height}\n".encode() + rgb.tobytes())


def load_checksums(path: Path = CHECKSUMS) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


# -- the release: a zip or the folder it unpacks to ------------------------------------------------


class Release:
    """``ChallengeDB_release.zip`` or its unpacked folder; files by their path under the
    release's top folder (the one holding ``Data/`` and ``Images/``), however deep that is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_dir():
            self._zip = None
            members = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()]
        elif zipfile.is_zipfile(path):
            self._zip = zipfile.ZipFile(path)
            members = [m for m in self._zip.namelist() if not m.endswith("/")]
        else:
            raise DataError(f"{path} is neither a zip nor a folder{_web_page_hint(path)}")
        members = [m for m in members if not m.startswith("__MACOSX/")]
        tables = [m for m in members if m == NAMES_MAT or m.endswith("/" + NAMES_MAT)]
        if len(tables) != 1:
            raise DataError(
                f"{path} is not LIVE-C's release: it should hold exactly one "
                f"{NAMES_MAT} (it holds {len(tables)})"
            )
        self.prefix = tables[0][: -len(NAMES_MAT)]
        self.members = {m[len(self.prefix) :]: m for m in members if m.startswith(self.prefix)}

    def __enter__(self) -> Release:
        return self

    def __exit__(self, *_: object) -> None:
        if self._zip is not None:
            self._zip.close()

    def read(self, name: str) -> bytes:
        member = self.members.get(name)
        if member is None:
            raise DataError(f"{self.path} has no {name}")
        if self._zip is None:
            return (self.path / member).read_bytes()
        return self._zip.read(member)

    def image(self, name: str) -> bytes:
        """A photo by its name in ``AllImages_release.mat``: in ``Images/`` or, for the seven
        training images, possibly ``Images/trainingImages/``."""
        for folder in ("Images/", "Images/trainingImages/"):
            if folder + name in self.members:
                return self.read(folder + name)
        raise DataError(f"{self.path} has no Images/{name}")

    def tables(self) -> dict[str, tuple[float, float]]:
        """Each photo's (MOS, standard deviation), by its name in the release."""
        import numpy as np
        from scipy.io import loadmat

        def variable(name: str, key: str) -> Any:
            content = loadmat(io.BytesIO(self.read(name)))
            if key not in content:
                raise DataError(f"{self.path}: {name} has no variable {key}")
            return content[key].ravel()

        def text(cell: Any) -> str:
            while isinstance(cell, np.ndarray) and cell.size:
                cell = cell.ravel()[0]
            return cell.strip() if isinstance(cell, str) else ""

        names = [text(c) for c in variable(NAMES_MAT, "AllImages_release")]
        mos = variable(MOS_MAT, "AllMOS_release")
        std = variable(STD_MAT, "AllStdDev_release")
        if not len(names) == len(mos) == len(std):
            raise DataError(
                f"{self.path}: {len(names)} names, {len(mos)} MOS and {len(std)} "
                "standard deviations: are the MAT files from one release?"
            )
        return {name: (float(m), float(s)) for name, m, s in zip(names, mos, std, strict=True)}

    def extract(self, target: Path) -> None:
        """The whole release under ``target`` (its own top folder's content), no file outside."""
        root = target.resolve()
        paths = {name: (root / name).resolve() for name in self.members}
        for name, path in paths.items():
            if root not in path.parents or PurePosixPath(name).is_absolute():
                raise DataError(
                    f"{self.path}: refusing {self.members[name]}, which would land outside {target}"
                )
        for name, path in paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.read(name))


def _web_page_hint(path: Path) -> str:
    try:
        start = path.read_bytes()[:512].lstrip().lower()
    except OSError:
        return ""
    if start.startswith((b"<!doctype html", b"<html")) or b"<html" in start:
        return (
            f": it is a web page. The download link on {LIVEC_PAGE} may need a browser: "
            f"download {ARCHIVE} there and give it with --archive"
        )
    return ""


def download(url: str, target: Path) -> Path:
    """``url`` saved as ``target``; a web page instead of a zip is an error that says so."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    print(f"downloading {url}", file=sys.stderr)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            done, step = 0, 50 * 2**20
            while chunk := response.read(2**20):
                out.write(chunk)
                done += len(chunk)
                if done // step != (done - len(chunk)) // step:
                    print(f"  {done / 2**20:.0f} MiB", file=sys.stderr)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise DataError(f"could not download {url}: {error}") from None
    if not zipfile.is_zipfile(partial):
        hint = _web_page_hint(partial) or ": not a zip"
        partial.unlink()
        raise DataError(f"{url} did not give {ARCHIVE}{hint}")
    partial.replace(target)
    return target


# -- laying out ------------------------------------------------------------------------------------


def copy_from_repository(target: Path, sets: Iterable[str] = COPIED) -> None:
    """The sets the repository holds whole, and the README, copied into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for name in sets:
        shutil.copytree(IN_REPOSITORY / name, target / name, dirs_exist_ok=True)
    shutil.copyfile(IN_REPOSITORY / "README.md", target / "README.md")


def lay_out_livec_extra(release: Release, target: Path, expected: dict[str, Any]) -> int:
    """``target``/livec-extra from the release: the photos ``expected`` lists (its rows of
    image, mos, mos_std), each the release's BMP of the same stem as PNG, and mos.csv with
    the recorded text, once the release's MOS agrees with it.  Returns the photos written."""
    from PIL import Image

    tables = release.tables()
    folder = target / "livec-extra"
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = expected["rows"]
    disagree = []
    for image, mos, std in rows:
        source = f"{PurePosixPath(image).stem}.bmp"
        if source not in tables:
            raise DataError(f"{release.path}: {NAMES_MAT} does not list {source}")
        if any(
            abs(found - float(recorded)) > MOS_TOLERANCE
            for found, recorded in zip(tables[source], (mos, std), strict=True)
        ):
            disagree.append(
                f"{source}: MOS {tables[source][0]:.4f}, SD {tables[source][1]:.4f} "
                f"(recorded: {mos}, {std})"
            )
    if disagree:
        raise DataError(
            f"{release.path}: the release's scores differ from those the tests were "
            f"written on for {len(disagree)} photos, e.g. {disagree[0]}"
        )
    for image, _, _ in rows:
        source = f"{PurePosixPath(image).stem}.bmp"
        with Image.open(io.BytesIO(release.image(source))) as bitmap:
            bitmap.convert("RGB").save(folder / "images" / image, "PNG", optimize=True)
    write_mos_csv(folder / "mos.csv", rows)
    shutil.copyfile(IN_REPOSITORY / "livec-extra" / "NOTICE.txt", folder / "NOTICE.txt")
    return len(rows)


def write_mos_csv(path: Path, rows: Iterable[list[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)  # "\r\n" line ends, as the recorded files have
        writer.writerow(["image", "mos", "mos_std"])
        writer.writerows(rows)


# -- checking --------------------------------------------------------------------------------------


@dataclass
class Check:
    """What a folder holds against what was recorded."""

    root: Path
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _file_matches(path: Path, recorded: dict[str, str]) -> str | None:
    """None when ``path`` is the recorded file; "pixels" when only its pixels are; else what
    is wrong."""
    if not path.is_file():
        return "missing"
    data = path.read_bytes()
    if sha256_of(data) == recorded["sha256"]:
        return None
    if "pixels" in recorded:
        try:
            if pixels_of(data) == recorded["pixels"]:
                return "pixels"
        except OSError:
            return "not an image"
    return "changed (SHA-256 differs)"


def check(root: Path, checksums: dict[str, Any] | None = None, partial: bool = False) -> Check:
    """``root`` against ``checksums``: every recorded set present, every file it lists the
    recorded one.  ``partial``: a photo set may hold only the first rows of its mos.csv (as
    ``tests/data/livec-extra`` does)."""
    checksums = checksums or load_checksums()
    result = Check(root)
    for name, recorded in checksums["sets"].items():
        folder = root / name
        if not folder.is_dir():
            result.problems.append(f"{name}/ is missing")
            continue
        if name in PHOTO_SETS:
            _check_photos(result, name, folder, recorded, partial)
        else:
            wrong = [
                (rel, _file_matches(folder / rel, digest))
                for rel, digest in recorded["files"].items()
            ]
            result.problems += [
                f"{name}/{rel}: {why}" for rel, why in wrong if why not in (None, "pixels")
            ]
            result.counts[name] = f"{sum(w is None for _, w in wrong)} of {len(wrong)} files"
    return result


def _check_photos(
    result: Check, name: str, folder: Path, recorded: dict[str, Any], partial: bool
) -> None:
    expected = recorded["rows"]
    if not (folder / "NOTICE.txt").is_file():
        result.problems.append(f"{name}/NOTICE.txt is missing: the licence requires it")
    try:
        with (folder / "mos.csv").open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except OSError:
        result.problems.append(f"{name}/mos.csv is missing")
        return
    header, rows = (rows[0] if rows else []), rows[1:]
    if header != ["image", "mos", "mos_std"]:
        result.problems.append(f"{name}/mos.csv: header {header}, not image,mos,mos_std")
    if rows != expected[: len(rows)]:
        first = next(i for i, row in enumerate(rows) if i >= len(expected) or row != expected[i])
        result.problems.append(
            f"{name}/mos.csv: row {first + 2} is {rows[first]}, recorded "
            f"{expected[first] if first < len(expected) else 'nothing'}"
        )
        return
    if len(rows) < len(expected) and not partial:
        result.problems.append(f"{name}: {len(rows)} of {len(expected)} photos")
    images = folder / "images"
    present = {p.name for p in images.iterdir() if p.is_file()} if images.is_dir() else set()
    listed = [row[0] for row in rows]
    unlisted = sorted(present - set(listed))
    if unlisted:
        result.problems.append(
            f"{name}/images: {len(unlisted)} files mos.csv does not list, e.g. {unlisted[0]}"
        )
    reencoded = 0
    for image in listed:
        why = _file_matches(images / image, recorded["files"][image])
        if why == "pixels":
            reencoded += 1
        elif why is not None:
            result.problems.append(f"{name}/images/{image}: {why}")
    if reencoded:
        result.notes.append(
            f"{name}: {reencoded} PNGs are encoded differently from the recorded "
            "ones, with the same pixels"
        )
    result.counts[name] = f"{len(rows)} of {len(expected)} photos"


def check_release_folder(folder: Path) -> str:
    """An unpacked release: every image its names list holds present; a count, or DataError."""
    with Release(folder) as release:
        names = list(release.tables())
        missing = [
            n
            for n in names
            if f"Images/{n}" not in release.members
            and f"Images/trainingImages/{n}" not in release.members
        ]
    if missing:
        raise DataError(
            f"{folder}: {len(missing)} of the {len(names)} images "
            f"{NAMES_MAT} lists are missing, e.g. {missing[0]}"
        )
    return f"{len(names)} images with MOS"


# -- recording (maintainers) -----------------------------------------------------------------------


def record(full_copy: Path) -> dict[str, Any]:
    """The checksums of a complete copy: for each photo set its mos.csv rows and each photo's
    SHA-256 (and a PNG's pixels); for the other sets each file's SHA-256."""
    sets: dict[str, Any] = {}
    for name in sorted(p.name for p in full_copy.iterdir() if p.is_dir()):
        folder = full_copy / name
        if name in PHOTO_SETS:
            with (folder / "mos.csv").open(newline="", encoding="utf-8") as handle:
                rows = list(csv.reader(handle))[1:]
            files = {}
            for image, _, _ in rows:
                data = (folder / "images" / image).read_bytes()
                files[image] = {"sha256": sha256_of(data)}
                if image.lower().endswith(".png"):
                    files[image]["pixels"] = pixels_of(data)
            sets[name] = {"count": len(rows), "rows": rows, "files": files}
        elif name in COPIED:
            sets[name] = {
                "files": {
                    p.relative_to(folder).as_posix(): {"sha256": sha256_of(p.read_bytes())}
                    for p in sorted(folder.rglob("*"))
                    if p.is_file() and p.name not in ("NOTICE.txt", "README.md")
                }
            }
    return {
        "about": "What scripts/fetch_data.py --check compares a data folder with: recorded "
        "from the complete copy the tests were written on (tests/data/README.md).",
        "sets": sets,
    }


def dump(document: dict[str, Any]) -> str:
    """JSON with a line per row and per file, for readable diffs."""

    def block(items: list[str], indent: str) -> str:
        return "\n" + ",\n".join(indent + item for item in items) + "\n"

    sets = []
    for name, content in document["sets"].items():
        parts = [f'"count": {content["count"]}'] if "count" in content else []
        if "rows" in content:
            parts.append(
                '"rows": [' + block([json.dumps(r) for r in content["rows"]], "    ") + "   ]"
            )
        parts.append(
            '"files": {'
            + block(
                [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in content["files"].items()], "    "
            )
            + "   }"
        )
        sets.append(f"  {json.dumps(name)}: {{\n   " + ",\n   ".join(parts) + "\n  }")
    text = (
        '{\n "about": '
        + json.dumps(document["about"])
        + ',\n "sets": {\n'
        + ",\n".join(sets)
        + "\n }\n}\n"
    )
    assert json.loads(text) == document
    return text


# -- the command -----------------------------------------------------------------------------------


def _print_check(result: Check) -> None:
    for name, count in result.counts.items():
        print(f"  {name}: {count}")
    for note in result.notes:
        print(f"  note: {note}")
    for problem in result.problems:
        print(f"  PROBLEM: {problem}")


def _find_release(target: Path, archive: Path | None, url: str | None) -> Path:
    if archive is not None:
        if not archive.exists():
            raise DataError(f"{archive} does not exist")
        return archive
    if url is not None:
        return download(url, target / ".downloads" / ARCHIVE)
    for candidate in (target / ARCHIVE, target / RELEASE, Path.cwd() / ARCHIVE):
        if candidate.exists():
            return candidate
    raise DataError(
        f"no {ARCHIVE} given. LIVE-C's release is on {LIVEC_PAGE}: download {ARCHIVE} there "
        "(its link may need a browser), then run this again with --archive PATH/TO/"
        f"{ARCHIVE} (or the folder it unpacks to), or put it in {target}"
    )


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n", 1)[0])


@app.command()
def main(
    into: Annotated[
        Path | None,
        typer.Option(
            help="folder to make (default: agentic-iqa/data in your cache folder, printed)"
        ),
    ] = None,
    archive: Annotated[
        Path | None, typer.Option(help=f"LIVE-C's {ARCHIVE}, or the folder it unpacks to")
    ] = None,
    url: Annotated[str | None, typer.Option(help=f"download {ARCHIVE} from this URL")] = None,
    full: Annotated[
        bool, typer.Option(help=f"also unpack the whole release as {RELEASE}/ (about 1,169 images)")
    ] = False,
    check_only: Annotated[
        Path | None,
        typer.Option("--check", help="only check this folder against the recorded checksums"),
    ] = None,
    write_checksums: Annotated[
        Path | None,
        typer.Option(hidden=True, help="record this complete copy in tests/data/checksums.json"),
    ] = None,
) -> None:
    try:
        if write_checksums is not None:
            CHECKSUMS.write_text(dump(record(write_checksums)), encoding="utf-8")
            print(f"wrote {CHECKSUMS}")
            return
        if check_only is not None:
            partial = check_only.resolve() == IN_REPOSITORY.resolve()
            result = check(check_only, partial=partial)
            print(f"{check_only}{' (the repository part)' if partial else ''}:")
            _print_check(result)
            raise typer.Exit(0 if result.ok else 1)
        target = (into or default_folder()).expanduser()
        print(f"data folder: {target}")
        source = _find_release(target, archive, url)
        copy_from_repository(target)
        with Release(source) as release:
            count = lay_out_livec_extra(release, target, load_checksums()["sets"]["livec-extra"])
            print(f"livec-extra: {count} photos from {source}")
            if full:
                if source.resolve() != (target / RELEASE).resolve():
                    release.extract(target / RELEASE)
                print(f"{RELEASE}: {check_release_folder(target / RELEASE)}")
        result = check(target)
        print(f"{target}:")
        _print_check(result)
        if not result.ok:
            raise DataError(f"{target} is not the data the tests were written on (above)")
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        raise typer.Exit(1) from None
    print(
        "\nThe tests, benchmarks and studies read it with:\n"
        f"export AGENTIC_IQA_DATA_DIR={target.resolve()}"
    )


if __name__ == "__main__":
    app()
