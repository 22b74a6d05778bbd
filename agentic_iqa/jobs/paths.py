"""The one place a path named by a manifest, a dataset file or a user becomes a file to open.

Every image and reference path goes through :func:`locate` against a :class:`Root`, once; what
comes back is the resolved file, and nothing else is ever opened.  A path that cannot be
trusted is a :class:`PathRejected` with the reason, which the manifest reader turns into a bad
row.  Dataset files come from the internet, so their root is always confining; a user's own
manifest is confined only when ``--root`` is given (its absolute paths are the user's choice,
as docs/jobs.md promises).

The rule is split in two so that an object store can reuse it: :func:`confined_key` is the
lexical part (no NUL, no absolute path, no ``..`` above the root) and gives a normalised
``a/b/c`` key that a bucket-and-prefix root would append to its prefix; the file-system part
(symlinks resolved, then checked against the resolved root) is :meth:`Root.resolve`.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path

from iqa_tools.storage import is_url


class PathRejected(ValueError):
    """A path that is not opened; the message says why, without the row's line.

    ``escape``: the path leads out of its confining root (the message then starts with
    "escapes"), as opposed to a file that is missing or unreadable.
    """

    def __init__(self, message: str, *, escape: bool = False) -> None:
        super().__init__(message)
        self.escape = escape


@dataclass(frozen=True)
class Root:
    """Where one source's paths are read from, and whether they must stay inside it.

    ``base``: the folder relative paths start from (the manifest's folder, ``--image-dir`` or
    the dataset's root).  ``confine``: the folder every path must resolve into, or None for a
    user's own manifest without ``--root``.  ``label``: how messages name the confining folder
    (``--root``).
    """

    base: str
    confine: str | None = None
    label: str = "--root"
    #: Folders' real paths as found while this root reads a source (:meth:`_real`).
    _folders: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        base: str | os.PathLike[str],
        confine: str | os.PathLike[str] | None = None,
        label: str = "--root",
    ) -> Root:
        """A root with both folders resolved (symlinks), so lexical checks compare like with
        like; a relative path resolves the same from the resolved base.  A URL (an object
        store's bucket and prefix) is kept as given."""
        return cls(
            base=_real(base), confine=_real(confine) if confine is not None else None, label=label
        )

    @property
    def remote(self) -> bool:
        """Whether names are read from (or confined to) a URL rather than this disk."""
        return is_url(self.base) or (self.confine is not None and is_url(self.confine))

    def resolve(self, text: str) -> str:
        """The real path of ``text`` (symlinks followed) if it may be opened, else raises."""
        if "\x00" in text:
            raise PathRejected("contains a NUL byte")
        if self.confine is not None:
            if os.path.isabs(text):
                if not _inside(os.path.realpath(text), self.confine):
                    raise PathRejected(
                        f"escapes {self.label} {self.confine} (an absolute path outside it)",
                        escape=True,
                    )
            elif not _inside(self.base, self.confine):
                raise PathRejected(
                    f"escapes {self.label} {self.confine} (read from {self.base}, outside it)",
                    escape=True,
                )
            else:
                confined_key(
                    posixpath.join(os.path.relpath(self.base, self.confine), text),
                    prefix=self.confine,
                    label=f"{self.label} {self.confine}",
                )
        try:
            resolved = self._real(os.path.join(self.base, text))
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, an odd name
            raise PathRejected(f"cannot be resolved: {exc}") from None
        if self.confine is not None and not _inside(resolved, self.confine):
            raise PathRejected(
                f"escapes {self.label} {self.confine} (through a symlink, to {resolved})",
                escape=True,
            )
        return resolved

    def _real(self, path: str) -> str:
        """``os.path.realpath(path)``, its folder's part found once per folder for this root:
        a million rows in one folder cost one ``lstat`` each, not one per part of the path.
        A file that is itself a symlink is resolved whole, as before."""
        folder, name = os.path.split(path)
        if name in ("", os.curdir, os.pardir):
            return os.path.realpath(path)
        real = self._folders.get(folder)
        if real is None:
            if len(self._folders) >= MAX_FOLDERS:
                self._folders.clear()
            real = self._folders[folder] = os.path.realpath(folder)
        candidate = os.path.join(real, name)
        try:
            if stat.S_ISLNK(os.lstat(candidate).st_mode):
                return os.path.realpath(candidate)
        except OSError:  # missing or unreadable: what realpath gives; locate says which
            pass
        return candidate


#: Folders whose real paths a root keeps while it reads (a few hundred bytes each).
MAX_FOLDERS = 4096


def confined_key(text: str, prefix: str = "", *, label: str = "--root") -> str:
    """``text`` as a normalised key under ``prefix`` (``a/b.jpg``) that cannot leave it.

    Lexical only, so the same rule holds for an object store (``prefix``: the bucket's
    prefix) and for files (``prefix``: the root's absolute path): a NUL byte and an absolute
    path are refused, and so is a ``..`` that ends outside ``prefix`` (one that climbs out and
    back in by name ends inside, and is read).
    """
    if "\x00" in text:
        raise PathRejected("contains a NUL byte")
    key = text.replace("\\", "/")
    if key.startswith("/") or os.path.isabs(text):
        raise PathRejected(
            f"escapes {label} (an absolute path; only paths under it are read)", escape=True
        )
    top = "/" + prefix.strip("/")
    normal = posixpath.normpath(posixpath.join(top, key))
    if not (top == "/" or normal == top or normal.startswith(top + "/")):
        raise PathRejected(f"escapes {label} ('..' climbs out of it)", escape=True)
    return normal[len(top) :].lstrip("/")


def locate(text: str, root: Root, *, digests: dict[str, str | None] | None = None) -> Path | str:
    """The existing regular file ``text`` names under ``root``: the single entry point; for an
    object in a store (a URL, or a name under a root URL), the object's URL.

    Raises :class:`PathRejected` for a path that leaves a confining root (``..``, absolute,
    symlink, another bucket or host), holds a NUL byte, or is missing, unreadable or not a
    file.  A store that refuses the credential raises :class:`StorageAccessDenied`: every row
    would fail the same way.  ``digests``: filled with each object's store digest (ETag,
    version), by URL, from the one request that checked it exists.
    """
    if "\x00" in text:
        raise PathRejected("contains a NUL byte")
    if is_url(text) or root.remote:
        return _locate_object(text, root, digests)
    resolved = root.resolve(text)
    try:
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        raise PathRejected(f"not found (looked for {resolved})") from None
    except (OSError, ValueError) as exc:
        raise PathRejected(f"cannot be read: {exc}") from None
    if not stat.S_ISREG(mode):
        raise PathRejected("is not a file")
    return Path(resolved)


def _locate_object(text: str, root: Root, digests: dict[str, str | None] | None) -> str:
    """``text`` as an object URL: a full URL (under the confining root URL, when there is
    one), or a relative name under the base URL; the object must exist."""
    from iqa_tools.errors import (
        LocationRefused,
        ObjectMissing,
        PathOutsideRoot,
        StorageError,
        StorageMisconfigured,
    )
    from iqa_tools.storage import display, join_under, stat

    try:
        if root.confine is not None:
            if not is_url(root.confine):
                raise PathRejected(
                    f"escapes {root.label} {root.confine} (an object URL, outside that folder)",
                    escape=True,
                )
            name = text if is_url(text) else join_under(root.base, text)
            location = join_under(root.confine, name)
        else:
            location = text if is_url(text) else join_under(root.base, text)
        found = stat(location, fresh=True)
    except PathOutsideRoot as outside:
        raise PathRejected(
            f"escapes {root.label} {outside.root} ({outside.reason})", escape=True
        ) from None
    except LocationRefused as refused:  # the reading's gate (iqa_tools.storage.access): never asked
        raise PathRejected(f"is not read: {refused.reason}") from None
    except ObjectMissing:
        raise PathRejected(f"not found (looked for {display(location)})") from None
    except StorageMisconfigured:
        raise  # a credential or a backend: every row would fail alike
    except StorageError as exc:
        raise PathRejected(f"cannot be read: {exc}") from None
    if digests is not None:
        digests[location] = found.digest
    return location


def _real(folder: str | os.PathLike[str]) -> str:
    text = os.fspath(folder)
    return text if is_url(text) else os.path.realpath(text)


def _inside(resolved: str, root: str) -> bool:
    """Whether a resolved path is ``root`` or below it (a plain prefix would let /data2 pass)."""
    return resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep)
