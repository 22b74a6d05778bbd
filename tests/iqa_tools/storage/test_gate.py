"""Reads through ``iqa_tools.storage`` behind its gate, against HTTP servers on loopback that
redirect, stall and lie about their size: what reached each server is counted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from iqa_tools import storage
from iqa_tools.errors import LocationRefused, ObjectTooLarge, StorageUnavailable
from iqa_tools.storage import web
from iqa_tools.storage.access import AccessPolicy, AddressRefused, reading
from tests.iqa_tools.storage.servers import PHOTO, Site, serve_site


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (
        ("AGENTIC_IQA_STORAGE_BACKOFF", "0.01"),
        ("AGENTIC_IQA_STORAGE_BACKOFF_MAX", "0.05"),
    ):
        monkeypatch.setenv(name, value)
    for name in ("AGENTIC_IQA_ALLOWED_LOCATIONS", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def site(quick: None) -> Iterator[Site]:
    yield from serve_site(Site(files={"/photos/good.png": PHOTO}))


@pytest.fixture
def other(quick: None) -> Iterator[Site]:
    yield from serve_site(Site(files={"/photos/good.png": PHOTO}))


def test_a_redirect_is_followed_only_where_the_gate_admits_it(site: Site, other: Site) -> None:
    site.redirects["/photos/same.png"] = "/photos/good.png"
    site.redirects["/photos/away.png"] = f"{other.url}/photos/good.png"
    site.redirects["/photos/meta.png"] = "http://169.254.169.254/latest/meta-data/"
    assert storage.read(f"{site.url}/photos/same.png") == PHOTO  # the caller named this host
    with pytest.raises(LocationRefused, match="redirects to .* loopback address"):
        storage.read(f"{site.url}/photos/away.png")
    with pytest.raises(LocationRefused, match="metadata service"):
        storage.stat(f"{site.url}/photos/meta.png")
    assert other.requests() == 0
    with (
        reading(AccessPolicy.for_source(root=f"{site.url}/photos")),
        pytest.raises(LocationRefused, match="escapes --root"),
    ):
        storage.read(f"{site.url}/photos/away.png")
    with (
        reading(AccessPolicy.for_source(allowed=(other.url,), allow_urls=True)),
        pytest.raises(LocationRefused, match="loopback"),
    ):
        storage.read(f"{site.url}/photos/away.png")  # the first host is not named
    assert other.requests() == 0


def test_the_connection_itself_refuses_a_name_that_resolves_to_loopback(site: Site) -> None:
    """The gate resolves a name to judge it; the connection resolves it again and judges
    again, so a name that answers differently the second time (DNS rebinding) gains nothing."""
    port = site.url.rsplit(":", 1)[1]
    with pytest.raises(AddressRefused, match="localhost resolves to .* loopback"):
        web.request(
            f"http://localhost:{port}/photos/good.png", "GET", strict=True, timeout=5, cap=10**7
        )
    assert site.requests() == 0
    reply = web.request(
        f"http://localhost:{port}/photos/good.png", "GET", strict=False, timeout=5, cap=10**7
    )
    assert reply.status == 200 and reply.body == PHOTO and site.requests() == 1


def test_one_object_has_one_deadline_for_all_its_attempts(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    site.stalls.add("/photos/stall.png")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_TIMEOUT", "1")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_ATTEMPTS", "5")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_DEADLINE", "2")
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match="within its deadline of 2 s"):
        storage.fetch(f"{site.url}/photos/stall.png")
    assert time.monotonic() - started < 4.5  # not 5 attempts x 1 s
    assert site.requests("/photos/stall.png") == 2


def test_a_body_is_capped_by_what_is_declared_and_by_what_arrives(
    site: Site, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_MAX_OBJECT_BYTES", "1MB")
    site.files["/photos/big.png"] = b"\0" * 2_000_000
    site.liars["/photos/liar.png"] = (1_000, 6_000_000)
    cache = storage.ObjectCache(tmp_path / "objects", max_bytes=10**8)
    with pytest.raises(ObjectTooLarge, match="is 2000000 bytes, above the cap of 1000000"):
        storage.stat(f"{site.url}/photos/big.png")
    with pytest.raises(ObjectTooLarge, match="is 2000000 bytes"):
        storage.fetch(f"{site.url}/photos/big.png", cache=cache)
    assert storage.stat(f"{site.url}/photos/liar.png").size == 1_000  # what its HEAD says
    with pytest.raises(ObjectTooLarge, match="sent more than 1000000 bytes"):
        storage.fetch(f"{site.url}/photos/liar.png", cache=cache)
    assert not [path for path in (tmp_path / "objects").rglob("*") if path.is_file()]
    assert ObjectTooLarge("x").stops_job is False
