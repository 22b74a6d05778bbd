"""``iqa_tools.storage`` against real servers on localhost: moto's S3 server (``moto[server]``),
a small S3 front that counts requests and injects throttling, refusals and stalls before
passing the rest on to moto, and Python's own HTTP file server for ``https``-style URLs.

Credentials are dummies set per test; ``AWS_ENDPOINT_URL`` points botocore at the server, as a
user's environment would for MinIO or Ceph.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest

from iqa_tools import storage
from iqa_tools.errors import (
    LocationRefused,
    ObjectChanged,
    ObjectMissing,
    PathOutsideRoot,
    StorageAccessDenied,
    StorageError,
    StorageMisconfigured,
    StorageUnavailable,
)
from tests.iqa_tools.storage.servers import Front, front_handler

SECRET = "dummy-secret-key-never-shown"


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_ATTEMPTS", "3")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_BACKOFF", "0.01")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_BACKOFF_MAX", "0.05")


@pytest.fixture
def bucket(moto_url: str, monkeypatch: pytest.MonkeyPatch, fast_retries: None) -> Iterator[str]:
    """A fresh bucket on the moto server, with dummy credentials in the environment."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "dummy-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for variable in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    name = f"images-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_url).create_bucket(Bucket=name)
    yield name
    storage.forget_filesystems()


def put(moto_url: str, bucket: str, key: str, data: bytes) -> None:
    boto3.client("s3", endpoint_url=moto_url).put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture
def front(moto_url: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Front]:
    """The counting, fault-injecting endpoint, made the one botocore talks to."""
    state = Front(upstream=moto_url)
    server = ThreadingHTTPServer(("127.0.0.1", 0), front_handler(state))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", state.url)
    yield state
    server.shutdown()
    server.server_close()


def test_locations_are_told_apart_from_paths():
    assert [
        storage.is_url(x) for x in ("s3://b/k", "https://h/x.png", "file:///x", "GS://b/k")
    ] == [True, True, True, True]
    assert [storage.is_url(x) for x in ("a/b.png", "/x", "C:\\x", "C://x", "")] == [False] * 5
    assert [storage.scheme(x) for x in ("s3://b/k", "HTTPS://h/x", "a/b", "C:\\x")] == [
        "s3",
        "https",
        None,
        None,
    ]
    assert storage.display("https://h/x.png?X-Amz-Signature=abc") == "https://h/x.png?***"


def test_an_s3_object_is_read_stated_and_fetched(moto_url: str, bucket: str, tmp_path: Path):
    data = os.urandom(5000)
    put(moto_url, bucket, "set/a.png", data)
    url = f"s3://{bucket}/set/a.png"

    info = storage.stat(url)
    assert info == storage.ObjectStat(url, 5000, "etag:" + hashlib.md5(data).hexdigest())
    assert storage.read(url) == data

    got, digest = storage.fetch(url)
    local = tmp_path / "a.png"
    local.write_bytes(data)
    assert got == data
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert storage.fetch(str(local)) == (data, digest)
    assert storage.fetch(url) == (data, digest)


def test_the_second_fetch_is_a_cache_hit_and_reads_the_object_once(
    moto_url: str, bucket: str, front: Front, tmp_path: Path
):
    data = os.urandom(3000)
    put(moto_url, bucket, "x.png", data)
    url = f"s3://{bucket}/x.png"
    cache = storage.ObjectCache(tmp_path / "objects", max_bytes=10**6)

    first = storage.fetch(url, cache=cache)
    second = storage.fetch(url, cache=cache)
    other_process = storage.ObjectCache(tmp_path / "objects", max_bytes=10**6)
    third = storage.fetch(url, cache=other_process)

    assert first == second == third
    assert (cache.hits, cache.misses) == (1, 1)
    assert (other_process.hits, other_process.misses) == (1, 0)
    assert front.seen[("GET", f"/{bucket}/x.png")] == 1
    # The GET's own ETag names the version cached, so no HEAD is needed, and a version seen
    # moments ago is served from the cache without asking the store again.
    assert front.seen[("HEAD", f"/{bucket}/x.png")] == 0
    assert [p.name for p in (tmp_path / "objects").glob("*/.tmp-*")] == []


def test_once_the_digest_is_stale_a_cache_hit_asks_the_store_first(
    moto_url: str, bucket: str, front: Front, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_FRESH_SECONDS", "0")
    put(moto_url, bucket, "y.png", b"first version")
    url = f"s3://{bucket}/y.png"
    cache = storage.ObjectCache(tmp_path / "objects", max_bytes=10**6)
    assert storage.fetch(url, cache=cache)[0] == b"first version"
    put(moto_url, bucket, "y.png", b"second version")
    assert storage.fetch(url, cache=cache)[0] == b"second version"
    hits = cache.hits
    assert storage.fetch(url, cache=cache)[0] == b"second version"
    # One conditional GET each (If-None-Match the cached ETag): the changed object's new bytes,
    # then "304 Not Modified" answered from the cache; never a HEAD before a read.
    assert front.seen[("HEAD", f"/{bucket}/y.png")] == 0
    assert front.seen[("GET", f"/{bucket}/y.png")] == 3
    assert cache.hits == hits + 1


def test_a_worker_with_the_recorded_version_cached_reads_no_body(
    moto_url: str, bucket: str, front: Front, tmp_path: Path
):
    data = os.urandom(5000)
    put(moto_url, bucket, "w.png", data)
    url = f"s3://{bucket}/w.png"
    recorded = storage.stat(url).digest
    cache = storage.ObjectCache(tmp_path / "objects", max_bytes=10**6)
    assert storage.fetch(url, expected=recorded, cache=cache)[0] == data
    storage.forget_filesystems()  # another worker process: nothing seen lately, the disk cache warm
    worker = storage.ObjectCache(tmp_path / "objects", max_bytes=10**6)

    assert storage.fetch(url, expected=recorded, cache=worker)[0] == data

    # If-Match the recorded ETag and If-None-Match the cached one: "304", served from disk.
    assert (worker.hits, worker.misses) == (1, 0)
    assert front.seen[("GET", f"/{bucket}/w.png")] == 2
    assert front.seen[("HEAD", f"/{bucket}/w.png")] == 1  # the submit's stat only


def test_the_cache_bound_evicts_the_least_recently_used(tmp_path: Path):
    cache = storage.ObjectCache(tmp_path, max_bytes=250)
    cache.put("s3://b/a", "etag:1", b"a" * 100)
    cache.put("s3://b/b", "etag:1", b"b" * 100)
    now = time.time()
    os.utime(cache._path(cache.key("s3://b/a", "etag:1")), (now - 30, now - 30))
    os.utime(cache._path(cache.key("s3://b/b", "etag:1")), (now - 20, now - 20))
    assert cache.get("s3://b/a", "etag:1") == b"a" * 100

    cache.put("s3://b/c", "etag:1", b"c" * 100)
    cache.put("s3://b/huge", "etag:1", b"h" * 300)

    assert cache.get("s3://b/b", "etag:1") is None
    assert cache.get("s3://b/huge", "etag:1") is None
    assert cache.get("s3://b/a", "etag:1") == b"a" * 100
    assert cache.get("s3://b/c", "etag:1") == b"c" * 100
    assert cache.get("s3://b/c", "etag:2") is None
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*") if p.suffix != ".latest") == 200
    assert (cache.hits, cache.misses) == (3, 3)


def test_the_cache_folder_and_bound_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("AGENTIC_IQA_OBJECT_CACHE", raising=False)
    monkeypatch.delenv("AGENTIC_IQA_OBJECT_CACHE_BYTES", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = storage.ObjectCache()
    assert default.directory == tmp_path / "home" / ".cache" / "agentic-iqa" / "objects"
    assert default.max_bytes == 2_000_000_000

    monkeypatch.setenv("AGENTIC_IQA_OBJECT_CACHE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("AGENTIC_IQA_OBJECT_CACHE_BYTES", "300MB")
    configured = storage.ObjectCache()
    assert (configured.directory, configured.max_bytes) == (tmp_path / "elsewhere", 300_000_000)


def test_an_object_overwritten_after_submit_is_reported_changed(
    moto_url: str, bucket: str, tmp_path: Path
):
    put(moto_url, bucket, "x.png", b"first version")
    url = f"s3://{bucket}/x.png"
    cache = storage.ObjectCache(tmp_path, max_bytes=10**6)
    recorded = storage.stat(url).digest
    _, recorded_sha = storage.fetch(url, expected=recorded, cache=cache)

    put(moto_url, bucket, "x.png", b"second version")

    for expected in (recorded, recorded_sha):
        with pytest.raises(ObjectChanged) as caught:
            storage.fetch(url, expected=expected, cache=cache)
        message = str(caught.value)
        assert message.startswith(f"the object {url} changed since the job was submitted")
        assert expected[:19] in message  # a sha256: shown to 12 hex digits
    assert storage.fetch(url, cache=cache)[0] == b"second version"


def test_a_missing_object_names_its_url(moto_url: str, bucket: str):
    for url in (f"s3://{bucket}/nope.png", f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/a.png"):
        for call in (storage.stat, storage.read, storage.fetch):
            with pytest.raises(ObjectMissing) as caught:
                call(url)
            assert url in str(caught.value)
            assert caught.value.stops_job is False


def test_a_refused_credential_stops_the_job_at_once(moto_url: str, bucket: str, front: Front):
    put(moto_url, bucket, "x.png", b"data")
    front.always = (403, "AccessDenied")
    url = f"s3://{bucket}/x.png"
    for call in (storage.stat, storage.read, storage.fetch):
        with pytest.raises(StorageAccessDenied) as caught:
            call(url)
        assert caught.value.stops_job is True
        assert url in str(caught.value) and "credential" in str(caught.value)
        assert SECRET not in str(caught.value) and "dummy-key-id" not in str(caught.value)
    assert sum(front.seen.values()) == 3


def test_throttling_once_is_retried_and_succeeds(moto_url: str, bucket: str, front: Front):
    put(moto_url, bucket, "x.png", b"data")
    url = f"s3://{bucket}/x.png"
    front.faults = [(503, "SlowDown")]
    assert storage.stat(url).size == 4
    front.faults = [(503, "SlowDown")]
    assert storage.read(url) == b"data"
    front.faults = [(429, "TooManyRequests"), (500, "InternalError")]
    assert storage.fetch(url)[0] == b"data"

    assert front.seen == Counter({("HEAD", f"/{bucket}/x.png"): 5, ("GET", f"/{bucket}/x.png"): 3})


def test_a_store_that_keeps_throttling_gives_up_after_the_configured_attempts(
    moto_url: str, bucket: str, front: Front
):
    put(moto_url, bucket, "x.png", b"data")
    assert storage.stat(f"s3://{bucket}/x.png").size == 4  # the client is made outside the clock
    front.always = (503, "SlowDown")
    with pytest.raises(StorageUnavailable) as caught:
        storage.read(f"s3://{bucket}/x.png")
    assert front.seen[("GET", f"/{bucket}/x.png")] == 3
    assert "3 attempt(s)" in str(caught.value) and "SlowDown" in str(caught.value)
    assert caught.value.stops_job is False


def test_a_stalled_store_times_out_and_is_retried(
    moto_url: str, bucket: str, front: Front, monkeypatch: pytest.MonkeyPatch
):
    put(moto_url, bucket, "x.png", b"data")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_TIMEOUT", "1.0")
    monkeypatch.setenv("AGENTIC_IQA_STORAGE_ATTEMPTS", "2")
    front.faults = ["stall"]
    assert storage.read(f"s3://{bucket}/x.png") == b"data"
    front.always = "stall"  # type: ignore[assignment]
    with pytest.raises(StorageUnavailable, match="timed out"):
        storage.read(f"s3://{bucket}/x.png")
    assert front.seen[("GET", f"/{bucket}/x.png")] == 4


def _child_read(url: str, queue: multiprocessing.Queue) -> None:
    try:
        queue.put(storage.read(url))
    except BaseException as exc:  # reported to the parent, which asserts
        queue.put(repr(exc))


def test_a_forked_worker_makes_its_own_client(moto_url: str, bucket: str):
    put(moto_url, bucket, "x.png", b"forked")
    url = f"s3://{bucket}/x.png"
    assert storage.read(url) == b"forked"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_read, args=(url, queue))
    child.start()
    result = queue.get(timeout=20)
    child.join(timeout=20)
    assert result == b"forked"
    assert child.exitcode == 0
    assert storage.read(url) == b"forked"


def test_a_url_with_a_credential_in_it_is_refused_without_echoing_it():
    with pytest.raises(LocationRefused) as caught:  # one location: its item fails, not the job
        storage.read("s3://AKIAEXAMPLE:s3cr3t-value@bucket/x.png")
    message = str(caught.value)
    assert "s3cr3t-value" not in message and "AKIAEXAMPLE" not in message
    assert "s3://***@bucket/x.png" in message and "environment" in message
    assert caught.value.stops_job is False
    with pytest.raises(StorageMisconfigured, match="unsupported scheme 'ftp'"):
        storage.stat("ftp://host/x.png")


S3_ROOT = "s3://bucket/prefix"
HOSTILE = [
    ("../x.png", "'..' climbs out"),
    ("a/../../x.png", "'..' climbs out"),
    ("%2e%2e/x.png", "'..' climbs out"),
    ("%252e%252e/%252e%252e/x.png", "'..' climbs out"),
    ("..%2fx.png", "'..' climbs out"),
    ("..\\x.png", "'..' climbs out"),
    ("/etc/passwd", "absolute path"),
    ("\\\\server\\share\\x.png", "absolute path"),
    ("C:\\x.png", "absolute path"),
    ("a\x00b.png", "NUL byte"),
    ("", "the root itself"),
    (".", "the root itself"),
    ("a/..", "the root itself"),
]


@pytest.mark.parametrize(
    ("name", "reason"),
    HOSTILE
    + [
        ("s3://other-bucket/prefix/x.png", "another bucket"),
        ("s3://bucket/other/x.png", "not under the root"),
        ("s3://bucket/prefix/../x.png", "not under the root"),
        ("https://bucket/prefix/x.png", "another scheme"),
        ("x.png?versionId=1", "query or fragment"),
    ],
)
def test_join_under_an_s3_root_refuses_names_that_leave_it(name: str, reason: str):
    with pytest.raises(PathOutsideRoot) as caught:
        storage.join_under(S3_ROOT, name)
    assert caught.value.name == name and caught.value.root == S3_ROOT
    assert reason in caught.value.reason
    assert repr(name) in str(caught.value) and S3_ROOT in str(caught.value)
    assert isinstance(caught.value, StorageError)


@pytest.mark.parametrize(
    ("name", "reason"),
    HOSTILE
    + [
        ("s3://bucket/x.png", "another scheme"),
        ("file:///etc/passwd", "not under the root"),
    ],
)
def test_join_under_a_local_root_refuses_names_that_leave_it(
    name: str, reason: str, tmp_path: Path
):
    for root in (str(tmp_path), f"file://{tmp_path}"):
        with pytest.raises(PathOutsideRoot) as caught:
            storage.join_under(root, name)
        assert reason in caught.value.reason and caught.value.root == root


def test_join_under_keeps_names_that_stay_inside(tmp_path: Path):
    assert storage.join_under(S3_ROOT, "a/b.png") == "s3://bucket/prefix/a/b.png"
    assert storage.join_under(S3_ROOT + "/", "a/../b.png") == "s3://bucket/prefix/b.png"
    assert storage.join_under(S3_ROOT, "sub\\c.png") == "s3://bucket/prefix/sub/c.png"
    assert storage.join_under(S3_ROOT, "s3://bucket/prefix/d.png") == "s3://bucket/prefix/d.png"
    assert storage.join_under(S3_ROOT, "100%.png") == "s3://bucket/prefix/100%.png"
    assert storage.join_under("s3://bucket", "x/y.png") == "s3://bucket/x/y.png"
    assert storage.join_under("https://host/data", "e.png") == "https://host/data/e.png"
    assert storage.join_under(str(tmp_path), "a/b.png") == str(tmp_path / "a" / "b.png")
    assert storage.join_under(f"file://{tmp_path}", "a.png") == f"file://{tmp_path}/a.png"
    assert (
        storage.join_under(f"file://{tmp_path}", f"file://{tmp_path}/z/a.png")
        == f"file://{tmp_path}/z/a.png"
    )
    assert storage.join_under("data", "b.png") == "data/b.png"


@pytest.fixture
def web(tmp_path: Path, fast_retries: None) -> Iterator[str]:
    """Python's HTTP file server on a folder, standing in for an HTTPS image host."""
    folder = tmp_path / "site"
    folder.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    storage.forget_filesystems()


def test_an_http_url_is_read_and_fetched(web: str, tmp_path: Path):
    data = os.urandom(2048)
    (tmp_path / "site" / "p.png").write_bytes(data)
    url = f"{web}/p.png"
    assert storage.stat(url) == storage.ObjectStat(url, 2048, None)
    assert storage.read(url) == data
    cache = storage.ObjectCache(tmp_path / "objects", max_bytes=10**6)
    assert storage.fetch(url, cache=cache) == (data, storage.sha256_digest(data))
    assert (cache.hits, cache.misses) == (0, 0)
    with pytest.raises(ObjectMissing, match="missing.png"):
        storage.read(f"{web}/missing.png")
    with pytest.raises(ObjectChanged):
        storage.fetch(url, expected="sha256:" + "0" * 64)


@pytest.mark.parametrize("status, code", [(401, "Unauthorized"), (403, "Forbidden")])
def test_a_web_server_that_refuses_one_url_fails_that_item_not_the_job(front: Front, status, code):
    """No credential is sent to a web address, so a refusal is that URL's own: a private file
    among public ones fails its item and the job goes on (an S3 store refusing the worker's
    credential still stops the job: test_object_store_jobs)."""
    front.always = (status, code)
    for read in (storage.stat, storage.read):
        with pytest.raises(StorageError) as refused:
            read(f"{front.url}/x.png")
        assert not isinstance(refused.value, StorageAccessDenied)
        assert refused.value.stops_job is False
        assert "refused" in str(refused.value) and "presigned URL" in str(refused.value)


def test_an_http_host_that_throttles_is_unavailable(front: Front):
    front.always = (429, "TooManyRequests")
    with pytest.raises(StorageUnavailable):
        storage.read(f"{front.url}/x.png")


def test_file_urls_and_paths_read_the_same_bytes(tmp_path: Path):
    data = b"local bytes"
    (tmp_path / "a b.png").write_bytes(data)
    path = str(tmp_path / "a b.png")
    url = f"file://{tmp_path}/a%20b.png"
    assert storage.read(url) == storage.read(path) == data
    assert storage.stat(url) == storage.ObjectStat(url, len(data), None)
    assert storage.fetch(url) == storage.fetch(path) == (data, storage.sha256_digest(data))
    with pytest.raises(ObjectMissing, match="nope.png"):
        storage.read(f"file://{tmp_path}/nope.png")
    with pytest.raises(ObjectMissing, match="not a file"):
        storage.read(str(tmp_path))
    with pytest.raises(ObjectChanged):
        storage.fetch(path, expected="etag:abc")
    with pytest.raises(StorageMisconfigured, match="another host"):
        storage.read("file://server/share/a.png")
