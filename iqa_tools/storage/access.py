"""What may be read: the one policy every read of a location passes, decided before any request.

A manifest can come from anyone, and every URL in it is a request sent from the submitter's and
the workers' network position with their credentials: another bucket, ``[::1]``, an internal
admin page, the cloud's instance-metadata address.  So storage (:mod:`.reads`) asks :func:`admit`
(through the :class:`Reading` in force) before it stats, reads, fetches or follows a redirect, and a
location the policy refuses is a :class:`~.errors.LocationRefused`: nothing is sent.

The rule (:class:`AccessPolicy`): a location is read when the user named it.

* ``confine`` (``--root``): every location lies under it (scheme, host or bucket, prefix); so
  does every redirect.
* ``named`` (``--root``, ``--image-dir``, a dataset's root) and ``allowed``
  (``AGENTIC_IQA_ALLOWED_LOCATIONS`` at submit: schemes, hosts, buckets, prefixes): anything
  under them; ``allow_urls`` (``--allow-urls``): any URL but ``file://``.  ``file://`` is read
  only under a named folder; a plain path is the user's own, as before (``--root`` confines it).
* ``caller_named``: the caller itself names what it reads (``assess IMAGE``, a library call, an
  output's URL): any location, but what it redirects to is judged as a manifest's URL.
* Addresses, by resolution (``0x7f000001``, ``[::1]``, a name that resolves to ``10.0.0.5``):
  loopback, private, link-local and other non-public addresses only for a host the user named
  (a named or allowed location's host, the store's endpoint ``AWS_ENDPOINT_URL``); a cloud
  metadata service (169.254.169.254, fd00:ec2::254, metadata.google.internal, ...) never.  The
  connection itself is checked again when its name is resolved (:mod:`.web`), so a name that
  resolves elsewhere the second time gains nothing.

A job's policy is stored with it (``agentic_iqa.runconfig``) and every worker reads the job's
items inside :func:`reading` with it and with the digests recorded at submit
(:func:`expected_digest`): the bytes scored are the bytes submitted.  Outside any reading the
policy is :meth:`AccessPolicy.ambient` (the caller names its locations).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import posixpath
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict

from ..errors import LocationRefused, PathOutsideRoot, StorageError, StorageMisconfigured
from .locations import REMOTE_SCHEMES, display, is_url, join_under, scheme

#: The allow-list's environment variable: entries separated by commas or white space.
ALLOWED_VARIABLE = "AGENTIC_IQA_ALLOWED_LOCATIONS"
#: The store endpoints a deployment configures: their hosts count as named.
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
WEB_SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}
#: The port of a host listed without one (``images.example.com``): any port of it.
ANY_PORT = 0

#: Cloud instance-metadata services, refused whatever the policy says: AWS (IPv4 and IPv6,
#: ECS and EKS credentials), GCP, Azure and Oracle (169.254.169.254), Alibaba.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "100.100.100.200",
    )
)
METADATA_NAMES = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
    }
)
#: NAT64's well-known prefix: ``64:ff9b::a9fe:a9fe`` is 169.254.169.254 behind a translator.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(OSError):
    """A host whose address the policy refuses (an :class:`OSError`, so that aiohttp's resolver
    path carries it); ``refused_address`` marks it for :mod:`.web`."""

    refused_address = True


# --- the policy ----------------------------------------------------------------------------


class AccessPolicy(BaseModel):
    """Which locations a reading may open (see the module docstring); stored with a job."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    #: Every location must lie under it (``--root``): a folder (resolved) or a URL.
    confine: str | None = None
    #: Locations the user named (``--root``, ``--image-dir``, a dataset's root).
    named: tuple[str, ...] = ()
    #: ``AGENTIC_IQA_ALLOWED_LOCATIONS`` as it was when the job was submitted.
    allowed: tuple[str, ...] = ()
    #: ``--allow-urls``: any URL but ``file://`` (at a public address unless its host is named).
    allow_urls: bool = False
    #: The caller names each location it reads (not a manifest's row).
    caller_named: bool = False

    @classmethod
    def ambient(cls) -> AccessPolicy:
        """The policy outside any reading: the caller names its locations; the environment's
        allow-list names hosts a redirect may reach."""
        return cls(caller_named=True, allowed=allowed_from_env())

    @classmethod
    def for_source(
        cls,
        *,
        root: str | os.PathLike[str] | None = None,
        image_dir: str | os.PathLike[str] | None = None,
        allow_urls: bool = False,
        allowed: tuple[str, ...] | None = None,
    ) -> AccessPolicy:
        """The policy of a manifest or dataset read from ``root`` (confining) and ``image_dir``;
        ``allowed`` None: the environment's allow-list now."""
        confine = _place(root) if root is not None else None
        named = tuple(
            place
            for place in (confine, _place(image_dir) if image_dir is not None else None)
            if place is not None
        )
        listed = allowed_from_env() if allowed is None else tuple(allowed)
        for entry in listed:
            _entry(entry)  # refused now, in one line, rather than row by row
        return cls(confine=confine, named=named, allowed=listed, allow_urls=allow_urls)

    # -- the decision --------------------------------------------------------------------

    def admit(self, location: str, *, redirected_from: str | None = None) -> None:
        """Return if ``location`` may be read (reached by a redirect from ``redirected_from``);
        else raise :class:`LocationRefused` with the reason.  Resolves a web host's name to
        judge its addresses; sends nothing to it."""
        kind = scheme(location)
        if kind is None:
            self._admit_path(location)
            return
        shown = display(location)
        parts = urlsplit(location)
        what = display(redirected_from) if redirected_from else shown
        hop = f"redirects to {shown}: " if redirected_from else ""
        if "@" in parts.netloc:
            raise _refused(
                what,
                shown,
                hop + "a URL must not carry a user or password; give "
                "the credential through the backend's environment or config file "
                "instead (for S3: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AWS_PROFILE or ~/.aws/credentials)",
            )
        if redirected_from is not None and kind not in WEB_SCHEMES:
            raise _refused(what, shown, hop + "not an http(s) URL")
        reason = self._lexical(location, kind, direct=redirected_from is None)
        if reason is not None:
            raise _refused(what, shown, hop + reason)
        if kind in WEB_SCHEMES:
            host, port = _host_port(location)
            try:
                check_host(
                    host, port, exempt=self.exempt(location, redirected_from=redirected_from)
                )
            except AddressRefused as refused:
                raise _refused(what, shown, hop + str(refused.strerror)) from None

    def exempt(self, location: str, *, redirected_from: str | None = None) -> bool:
        """Whether ``location``'s host may be at a non-public address: the caller named it (or
        it is the same host the caller named, redirecting to itself), or the user named that
        host.  Its connection then comes from the pool that refuses only metadata services."""
        host, port = _host_port(location)
        if self.caller_named and (
            redirected_from is None or _host_port(redirected_from) == (host, port)
        ):
            return True
        named = self.named_hosts()
        return (host, port) in named or (host, ANY_PORT) in named

    def _lexical(self, location: str, kind: str, *, direct: bool) -> str | None:
        """Why ``location`` is not among what was named, or None."""
        if self.confine is not None:
            try:
                _under(self.confine, location, keep_query=True)
            except PathOutsideRoot as outside:
                return f"escapes --root {display(self.confine)} ({outside.reason})"
            return None
        if self.caller_named and direct:
            return None
        if any(_inside(place, location) for place in self.named):
            return None
        if any(_entry(entry).matches(location) for entry in self.allowed):
            return None
        if kind == "file":
            return (
                "file:// is read only under --root or --image-dir (a plain path is read as "
                "the user's own file)"
            )
        if self.allow_urls or self.caller_named:
            return None
        return (
            "a manifest's URL is read only where the user named it: under --root or "
            f"--image-dir, with --allow-urls, or listed in {ALLOWED_VARIABLE}"
        )

    def _admit_path(self, path: str) -> None:
        """A plain path: the user's own file, unless ``--root`` confines it."""
        if self.confine is None:
            return
        if is_url(self.confine):
            raise _refused(path, path, f"escapes --root {display(self.confine)} (a local path)")
        normal = os.path.normpath(os.path.abspath(path))
        top = os.path.normpath(self.confine)
        if normal != top and not normal.startswith(top.rstrip(os.sep) + os.sep):
            raise _refused(path, path, f"escapes --root {self.confine}")

    def check_opened(self, path: str, real: str) -> None:
        """Refuse a local file opened at ``path`` whose real path (that of what was opened,
        after every symlink) lies outside ``--root``: a folder swapped for a link after submit
        leads nowhere the job was not given."""
        if self.confine is None or is_url(self.confine):
            return
        top = os.path.normpath(self.confine)
        if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
            raise LocationRefused(
                f"{path} escapes --root {self.confine} when opened: it is {real} (a symlink "
                "leads out of the root); it was not read",
                path,
                reason=f"escapes --root {self.confine} when opened (a symlink to {real})",
            )

    def as_allowed(self) -> tuple[str, ...]:
        """An allow-list that names what this policy names (its allow-list and its named
        URLs), for rows already resolved to full locations (a sample of a job's items)."""
        return (
            *self.allowed,
            *(
                place
                for place in (*self.named, *((self.confine,) if self.confine else ()))
                if is_url(place)
            ),
        )

    def named_hosts(self) -> frozenset[tuple[str, int]]:
        """(host, port) of every web location the user named, the allow-list's hosts and the
        store's endpoints: the hosts that may be at a private address (port
        :data:`ANY_PORT`: a bare host listed without one)."""
        return _named_hosts(self.confine, self.named, self.allowed, _endpoints())


def _refused(what: str, shown: str, reason: str) -> LocationRefused:
    return LocationRefused(f"{what}: {reason}", shown, reason)


def allowed_from_env() -> tuple[str, ...]:
    """``AGENTIC_IQA_ALLOWED_LOCATIONS``, split on commas and white space."""
    raw = os.environ.get(ALLOWED_VARIABLE, "")
    return tuple(part for part in raw.replace(",", " ").split() if part)


def _place(value: str | os.PathLike[str]) -> str:
    """A named location as kept: a URL as given, a folder absolute with symlinks resolved."""
    text = os.fspath(value)
    return text if is_url(text) else os.path.realpath(text)


def _endpoints() -> tuple[str, ...]:
    return tuple(value for name in ENDPOINT_VARIABLES if (value := os.environ.get(name, "")))


@lru_cache(maxsize=64)
def _named_hosts(
    confine: str | None,
    named: tuple[str, ...],
    allowed: tuple[str, ...],
    endpoints: tuple[str, ...],
) -> frozenset[tuple[str, int]]:
    hosts: set[tuple[str, int]] = set()
    for place in (*((confine,) if confine else ()), *named, *endpoints):
        if scheme(place) in WEB_SCHEMES:
            try:
                hosts.add(_host_port(place))
            except LocationRefused:
                continue
    for entry in allowed:
        hosts.update(_entry(entry).hosts())
    return frozenset(hosts)


def _host_port(location: str) -> tuple[str, int]:
    """(host in lower case, port) of a web URL, the scheme's default port when none is given."""
    parts = urlsplit(location)
    try:
        port = parts.port
    except ValueError:
        raise LocationRefused(f"{location}: the port is not a number", location) from None
    host = (parts.hostname or "").rstrip(".")
    return host, port or DEFAULT_PORTS.get(parts.scheme.lower(), 0)


def _strip(location: str) -> str:
    """``location`` without its query and fragment (a presigned URL names the same object)."""
    return location.split("#", 1)[0].split("?", 1)[0]


def _under(root: str, location: str, *, keep_query: bool = False) -> None:
    """Raise :class:`PathOutsideRoot` unless ``location`` lies under ``root`` (the lexical rule
    of :func:`.locations.join_under`, percent-decoded spellings included)."""
    join_under(root, location if keep_query else _strip(location))


def _inside(root: str, location: str) -> bool:
    try:
        _under(root, location)
    except StorageError:
        return False
    return True


# --- the allow-list ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """One allow-list entry: a scheme (``https``, ``s3:``), a host (``images.example.com``,
    ``*.example.com``, ``10.0.0.5:9000``: http and https), a URL naming a host or bucket
    (``https://cdn.example.com``, ``s3://team-bucket``) or a prefix under one
    (``s3://team-bucket/photos/``)."""

    text: str
    scheme: str | None
    host: str | None
    port: int | None
    prefix: str

    def matches(self, location: str) -> bool:
        kind = scheme(location)
        if self.scheme is not None and kind != self.scheme:
            return False
        if self.scheme is None and kind not in WEB_SCHEMES:
            return False
        if self.host is None:
            return True
        parts = urlsplit(location)
        if kind in WEB_SCHEMES:
            host, port = _host_port(location)
            wanted_port = self.port or DEFAULT_PORTS.get(kind or "", 0)
            if self.port is None and self.scheme is None:
                wanted_port = port  # a bare host: any port of it
            if port != wanted_port or not _host_matches(self.host, host):
                return False
        elif parts.netloc.lower() != self.host:
            return False
        if not self.prefix:
            return True
        return _inside(f"{kind}://{parts.netloc}/{self.prefix}", location)

    def hosts(self) -> set[tuple[str, int]]:
        """The (host, port) pairs this entry names for the address rule (none for a scheme or
        a wildcard: those name no particular host)."""
        if (
            self.host is None
            or self.host.startswith("*.")
            or (self.scheme is not None and self.scheme not in WEB_SCHEMES)
        ):
            return set()
        if self.port is not None:
            return {(self.host, self.port)}
        if self.scheme is None:
            return {(self.host, ANY_PORT)}
        return {(self.host, DEFAULT_PORTS[self.scheme])}


def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and fnmatch.fnmatchcase(host, pattern)
    return host == pattern


@lru_cache(maxsize=256)
def _entry(text: str) -> _Entry:
    """An allow-list entry parsed, or :class:`StorageMisconfigured` saying what is wrong."""

    def bad(why: str) -> StorageMisconfigured:
        return StorageMisconfigured(f"{ALLOWED_VARIABLE}: entry {text!r} {why}")

    bare = text.rstrip(":/").lower()
    if bare in REMOTE_SCHEMES:
        return _Entry(text, bare, None, None, "")
    if bare == "file":
        raise bad("is refused: file:// is read only under --root or --image-dir")
    kind = scheme(text)
    if kind is None:  # a bare host, for http and https
        parts = urlsplit("//" + text)
        if parts.path.strip("/") or "@" in parts.netloc or not parts.hostname:
            raise bad("is neither a scheme, a host, nor a URL (write https://host/prefix)")
        return _Entry(text, None, parts.hostname.rstrip("."), _port(parts, bad), "")
    if kind == "file":
        raise bad("is refused: file:// is read only under --root or --image-dir")
    if kind not in REMOTE_SCHEMES:
        raise bad(f"has an unsupported scheme {kind!r}")
    parts = urlsplit(text)
    if "@" in parts.netloc or parts.query or parts.fragment or not parts.netloc:
        raise bad("must name a host or bucket, with no user, password, query or fragment")
    prefix = posixpath.normpath("/" + parts.path).strip("/")
    if kind in WEB_SCHEMES:
        return _Entry(
            text,
            kind,
            (parts.hostname or "").rstrip("."),
            _port(parts, bad),
            prefix if prefix != "." else "",
        )
    return _Entry(text, kind, parts.netloc.lower(), None, prefix if prefix != "." else "")


def _port(parts: SplitResult, bad: Callable[[str], StorageMisconfigured]) -> int | None:
    try:
        return parts.port
    except ValueError:
        raise bad("has a port that is not a number") from None


# --- addresses -----------------------------------------------------------------------------


def check_host(host: str, port: int, *, exempt: bool) -> None:
    """Raise :class:`AddressRefused` when ``host`` is a metadata service, or resolves to one,
    or (unless ``exempt``) to any address that is not public.  A name that does not resolve is
    left to the connection, which fails on its own."""
    judge_addresses(host, resolve(host, port), exempt=exempt)


def judge_addresses(host: str, addresses: list[str], *, exempt: bool) -> None:
    """The address rule on ``host``'s resolved ``addresses``; raises :class:`AddressRefused`."""
    name = host.lower().rstrip(".")
    if name in METADATA_NAMES:
        raise AddressRefused(0, f"{host} is a cloud metadata service, never read")
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        for form in _forms(address):
            if form in METADATA_ADDRESSES:
                raise AddressRefused(
                    0, f"{host} resolves to {address}, a cloud metadata service, never read"
                )
            if not exempt and not form.is_global:
                raise AddressRefused(
                    0,
                    f"{host} resolves to {address}, a {_kind(form)} address: read only "
                    "from a host the user named (--root, --image-dir, the store's endpoint "
                    f"AWS_ENDPOINT_URL, or {ALLOWED_VARIABLE})",
                )


def _forms(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), then itself: each judged,
    the carried one first (its kind is what the message names)."""
    forms: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            forms.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            forms.append(address.sixtofour)
        if address in _NAT64:
            forms.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [*forms, address]


def _kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    for label, flag in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
    ):
        if flag:
            return label
    return "non-public"


_RESOLVED: dict[tuple[str, int], tuple[float, list[str]]] = {}
_RESOLVED_LOCK = threading.Lock()
#: Seconds a name's addresses are kept for the gate's own check (the connection resolves again).
RESOLVE_SECONDS = 30.0


def resolve(host: str, port: int) -> list[str]:
    """``host``'s addresses as the system resolves them (``0x7f000001`` is 127.0.0.1, a literal
    is itself), kept a few seconds; none when it does not resolve."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]").split("%", 1)[0]))]
    except ValueError:
        pass
    key = (host, port)
    now = time.monotonic()
    with _RESOLVED_LOCK:
        kept = _RESOLVED.get(key)
        if kept is not None and now - kept[0] < RESOLVE_SECONDS:
            return kept[1]
    try:
        found = sorted(
            {str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
        )
    except (OSError, UnicodeError):
        return []
    with _RESOLVED_LOCK:
        if len(_RESOLVED) > 4096:
            _RESOLVED.clear()
        _RESOLVED[key] = (now, found)
    return found


# --- the reading in force ------------------------------------------------------------------


@dataclass
class Reading:
    """A policy in force, the digests recorded for its locations, and the failures met so far
    (a location the lookahead found stalled or missing is not asked again by the row check).
    A worker's step is one reading: its item's objects are checked against the store once."""

    policy: AccessPolicy
    expected: Mapping[str, str] = field(default_factory=dict)
    failures: dict[str, tuple[type[StorageError], str, str]] = field(default_factory=dict)
    #: Locations the store confirmed are still the version in ``expected``: later reads in
    #: this reading may use the copy cached here without asking again.
    verified: set[str] = field(default_factory=set)

    def admit(self, location: str, *, redirected_from: str | None = None) -> None:
        """:meth:`AccessPolicy.admit`, and a failure this reading met for ``location`` raised
        again without a request."""
        failed = self.failures.get(location)
        if failed is not None and redirected_from is None:
            kind, message, shown = failed
            raise kind(message, shown)
        self.policy.admit(location, redirected_from=redirected_from)

    def failed(self, location: str, error: StorageError) -> None:
        """Remember that ``location`` failed (one item's failure, not a refusal)."""
        if not error.stops_job and type(error).__init__ is StorageError.__init__:
            self.failures[location] = (type(error), str(error), error.location)


_READING: ContextVar[Reading | None] = ContextVar("iqa_tools_reading", default=None)


def current() -> Reading:
    """The reading in force in this thread, else one under :meth:`AccessPolicy.ambient`."""
    found = _READING.get()
    return found if found is not None else Reading(AccessPolicy.ambient())


def admit(location: str, *, redirected_from: str | None = None) -> None:
    """Admit ``location`` through the reading in force, or raise :class:`LocationRefused`.

    Every read of a location starts here, before any request; a name resolved while judging
    it that lands on a refused address is refused the same way."""
    try:
        current().admit(location, redirected_from=redirected_from)
    except AddressRefused as refused:
        raise LocationRefused(
            f"{display(location)}: {refused.strerror}", display(location)
        ) from None


@contextmanager
def reading(
    policy: AccessPolicy | Reading | None = None, expected: Mapping[str, str | None] | None = None
) -> Iterator[Reading]:
    """Read under ``policy`` (None: the ambient one) until the block ends, each location in
    ``expected`` checked to be the version recorded then.  A :class:`Reading` is entered as
    it is (another thread of the same reading: its failures are shared)."""
    if isinstance(policy, Reading):
        scope = policy
    else:
        scope = Reading(
            policy if policy is not None else AccessPolicy.ambient(),
            {key: value for key, value in (expected or {}).items() if key and value},
        )
    token = _READING.set(scope)
    try:
        yield scope
    finally:
        _READING.reset(token)


def expected_digest(location: str) -> str | None:
    """The digest recorded at submit for ``location`` in the reading in force, if any."""
    found = _READING.get()
    return found.expected.get(location) if found is not None else None
