"""Where an image is, as text: a path or a URL, its scheme, how a message shows it, and the
lexical rule that keeps a relative name under its root.

Pure string work, no request and no policy: :mod:`.reads` reads locations, :mod:`.access`
decides which may be read, and both judge them with these functions.
"""

from __future__ import annotations

import os
import posixpath
import re
from urllib.parse import unquote, urlsplit

from ..errors import PathOutsideRoot, StorageMisconfigured

#: Schemes read through fsspec, with the extra that installs each backend.
REMOTE_SCHEMES: dict[str, str] = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "http": "",
    "https": "",
}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# --- locations --------------------------------------------------------------------------------


def scheme(location: str) -> str | None:
    """The URL scheme in lower case (``s3``, ``https``, ``file``), or None for a path.

    A single letter before ``://`` is a Windows drive, not a scheme."""
    found = _SCHEME.match(location)
    if found is None or len(found.group(1)) < 2:
        return None
    return found.group(1).lower()


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL (``s3://b/k``, ``https://...``, ``file:///x``), not a path."""
    return scheme(location) is not None


def display(location: str) -> str:
    """``location`` as messages show it: a query string (a presigned URL's signature) and any
    user information masked, so a message never needs redaction to be safe."""
    if not is_url(location):
        return location
    parts = urlsplit(location)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return shown + ("?***" if parts.query else "") + ("#***" if parts.fragment else "")


def check_url(location: str) -> str:
    """Return the scheme of a URL storage may read; refuse credentials written into it."""
    name = scheme(location)
    assert name is not None
    if "@" in urlsplit(location).netloc:
        raise StorageMisconfigured(
            f"{display(location)}: a URL must not carry a user or password; give the "
            "credential through the backend's environment or config file instead (for S3: "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials)",
            location=display(location),
        )
    if name != "file" and name not in REMOTE_SCHEMES:
        raise StorageMisconfigured(
            f"{display(location)}: unsupported scheme {name!r} (use a path, file://, s3://, "
            "gs://, az://, http:// or https://)",
            location=display(location),
        )
    return name


def local_path(location: str) -> str | None:
    """Return the path to open directly for a plain path or a ``file://`` URL, else None."""
    name = scheme(location)
    if name is None:
        return location
    if check_url(location) == "file":
        return _file_path(location)
    return None


def _file_path(location: str) -> str:
    """The local path of a ``file://`` URL (percent-decoded); another host's file is refused."""
    parts = urlsplit(location)
    if parts.netloc not in ("", "localhost"):
        raise StorageMisconfigured(
            f"{display(location)}: a file:// URL names a file on this machine; another host "
            f"({parts.netloc}) is not reachable this way",
            location=display(location),
        )
    return unquote(parts.path)


# --- confinement ------------------------------------------------------------------------------


def join_under(root: str, name: str) -> str:
    """``name`` (a relative name from a manifest or dataset file) under ``root`` (a folder, a
    ``file://`` URL or a bucket-and-prefix URL), in the root's form; it cannot leave the root.

    Raises :class:`PathOutsideRoot` for a NUL byte, an absolute path or drive, a ``..`` that
    climbs out (also when spelt ``%2e%2e`` or with backslashes), another scheme, bucket or
    host, a query or fragment, or a name that is the root itself.  A full URL is accepted when
    it lies under the root.  Lexical only, as ``confined_key``: a local symlink is the
    opener's business (``Root.resolve``).
    """
    if _CONTROL.search(root):
        raise StorageMisconfigured(f"root {root!r} contains a control character", location=root)
    root_scheme = scheme(root)
    if root_scheme is not None:
        check_url(root)
    if root_scheme in (None, "file"):
        base = _file_path(root) if root_scheme == "file" else root
        prefix = posixpath.normpath(base.replace("\\", "/")) if base else "."
        key = _relative_name(name, root, root_scheme, "", prefix)
        joined = posixpath.join(prefix, key) if prefix != "." else key
        if root_scheme == "file":
            return "file://" + joined
        return joined if os.sep == "/" else joined.replace("/", os.sep)
    parts = urlsplit(root)
    if parts.query or parts.fragment:
        raise PathOutsideRoot(
            name, display(root), "a root URL with a query or fragment cannot hold relative names"
        )
    prefix = parts.path.strip("/")
    key = _relative_name(name, root, root_scheme, parts.netloc, prefix)
    return f"{parts.scheme}://{parts.netloc}/" + (f"{prefix}/{key}" if prefix else key)


def _relative_name(name: str, root: str, root_scheme: str | None, netloc: str, prefix: str) -> str:
    """The checked key of ``name`` below ``prefix``; a URL name must share the root's scheme
    and host and is turned into its relative part first."""
    shown = display(root)
    if _CONTROL.search(name):
        raise PathOutsideRoot(name, shown, "it contains a NUL byte or another control character")
    name_scheme = scheme(name)
    if name_scheme is not None:
        if "@" in urlsplit(name).netloc:
            raise PathOutsideRoot(
                display(name),
                shown,
                "a URL must not carry a user or password; use the backend's environment instead",
            )
        if name_scheme != (root_scheme or "file"):
            raise PathOutsideRoot(name, shown, f"another scheme ({name_scheme}://) than the root's")
        parts = urlsplit(name)
        if root_scheme in (None, "file"):
            path = _file_path(name)
        elif parts.netloc.lower() != netloc.lower():
            raise PathOutsideRoot(
                name, shown, f"another bucket or host ({parts.netloc}) than the root's"
            )
        else:
            path = parts.path
        if parts.query or parts.fragment:
            raise PathOutsideRoot(
                display(name), shown, "a query or fragment is not part of an object's name"
            )
        top = "/" + prefix.strip("/")
        normal = posixpath.normpath("/" + path.lstrip("/"))
        if not (top == "/" or normal.startswith(top.rstrip("/") + "/")):
            raise PathOutsideRoot(name, shown, "the URL is not under the root")
        name = normal[len(top) :].lstrip("/") if top != "/" else normal.lstrip("/")
    elif root_scheme not in (None, "file") and ("?" in name or "#" in name):
        raise PathOutsideRoot(
            name, shown, "'?' and '#' would start a query or fragment, not name an object"
        )
    key = ""
    for form in _spellings(name):
        checked = _confined_key(form, prefix, name, shown)
        key = key or checked
    if not key:
        raise PathOutsideRoot(name, shown, "it names the root itself, not an object under it")
    return key


def _spellings(name: str) -> list[str]:
    """``name`` as written and as a server would decode it (``%2e%2e`` is ``..``, ``%2f`` a
    slash), up to three rounds of percent-decoding: each must stay under the root."""
    forms = [name]
    while len(forms) < 4:
        decoded = unquote(forms[-1])
        if decoded == forms[-1]:
            break
        forms.append(decoded)
    return forms


def _confined_key(text: str, prefix: str, name: str, root: str) -> str:
    """The lexical rule of ``agentic_iqa.jobs.paths.confined_key``, mirrored: backslashes are
    separators, an absolute path (or drive) is refused, and so is a ``..`` ending outside
    ``prefix``; one that climbs out and back in by name ends inside and is kept."""
    if "\x00" in text:
        raise PathOutsideRoot(name, root, "it contains a NUL byte")
    key = text.replace("\\", "/")
    if key.startswith("/") or os.path.isabs(text) or _DRIVE.match(key):
        raise PathOutsideRoot(name, root, "an absolute path; only names under the root are read")
    top = "/" + prefix.strip("/")
    normal = posixpath.normpath(posixpath.join(top, key))
    if not (top == "/" or normal == top or normal.startswith(top + "/")):
        raise PathOutsideRoot(name, root, "'..' climbs out of it")
    return normal[len(top) :].lstrip("/")
