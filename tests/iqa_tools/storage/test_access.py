"""``iqa_tools.storage.access``: the rule of what may be read, judged on real addresses (the
system's own resolver) and real spellings; no request is involved here."""

from __future__ import annotations

import pytest

from iqa_tools.errors import LocationRefused, ObjectMissing, StorageMisconfigured
from iqa_tools.storage import access
from iqa_tools.storage.access import AccessPolicy, AddressRefused, Reading, judge_addresses, reading


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTIC_IQA_ALLOWED_LOCATIONS", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


MANIFEST = AccessPolicy.for_source()  # a manifest with no root, no image folder, no opt-in
OPTED_IN = AccessPolicy.for_source(allow_urls=True)


def refusal(policy: AccessPolicy, location: str, **keywords: str) -> str:
    with pytest.raises(LocationRefused) as refused:
        policy.admit(location, **keywords)
    return refused.value.reason


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "0x7f000001",
        "2130706433",
        "0177.0.0.1",
        "127.1",
        "localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[0:0:0:0:0:ffff:7f00:1]",
    ],
)
def test_loopback_is_refused_whatever_its_spelling(host: str) -> None:
    reason = refusal(OPTED_IN, f"http://{host}:8080/x.png")
    assert "loopback address" in reason and "a host the user named" in reason


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("10.1.2.3", "private"),
        ("192.168.0.7", "private"),
        ("172.20.0.1", "private"),
        ("[fd12::1]", "private"),
        ("169.254.10.10", "link-local"),
        ("[fe80::1]", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "non-public"),
    ],
)
def test_private_and_link_local_addresses_are_refused_unless_named(host: str, kind: str) -> None:
    location = f"https://{host}/photos/x.png"
    assert f"a {kind} address" in refusal(OPTED_IN, location)
    named = AccessPolicy.for_source(image_dir=f"https://{host}/photos")
    named.admit(location)  # the user named that host
    listed = AccessPolicy.for_source(allowed=(host,))
    listed.admit(location)  # or listed it


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "[fd00:ec2::254]",
        "[::ffff:169.254.169.254]",
        "[64:ff9b::a9fe:a9fe]",
        "[2002:a9fe:a9fe::1]",
        "metadata.google.internal",
        "METADATA.GOOGLE.INTERNAL.",
        "100.100.100.200",
        "169.254.170.2",
    ],
)
def test_cloud_metadata_is_refused_even_when_named_or_given_by_the_caller(host: str) -> None:
    location = f"http://{host}/latest/meta-data/iam"
    for policy in (
        OPTED_IN,
        AccessPolicy.for_source(image_dir=f"http://{host}/latest"),
        AccessPolicy.for_source(allowed=("http",)),
        AccessPolicy.ambient(),
    ):
        assert "metadata service" in refusal(policy, location), policy


def test_a_public_address_is_judged_by_its_addresses_not_its_name() -> None:
    judge_addresses("images.example.com", ["93.184.216.34", "2606:2800:220:1::1"], exempt=False)
    with pytest.raises(AddressRefused, match="10.0.0.5, a private address"):
        judge_addresses("rebound.example.com", ["93.184.216.34", "10.0.0.5"], exempt=False)
    judge_addresses("minio.internal", ["10.0.0.5"], exempt=True)
    with pytest.raises(AddressRefused, match="metadata"):
        judge_addresses("minio.internal", ["169.254.169.254"], exempt=True)


def test_without_a_root_a_manifests_url_needs_an_opt_in() -> None:
    for location in (
        "s3://another-bucket/private/secret.jpg",
        "https://cdn.example.org/a.png",
        "gs://bucket/a.png",
    ):
        assert "read only where the user named it" in refusal(MANIFEST, location)
        OPTED_IN.admit(location.replace("cdn.example.org", "93.184.216.34"))
    for policy in (MANIFEST, OPTED_IN):
        assert "file:// is read only under --root or --image-dir" in refusal(
            policy, "file:///etc/passwd"
        )
    MANIFEST.admit("/home/user/photos/a.png")  # a plain path stays the user's own


def test_a_root_confines_every_spelling_and_every_redirect(tmp_path) -> None:
    policy = AccessPolicy.for_source(root="s3://photos/set1", allow_urls=True)
    policy.admit("s3://photos/set1/a/b.png")
    for location, why in (
        ("s3://photos/set1/../set2/a.png", "not under the root"),
        ("s3://photos/set1/%2e%2e/set2/a.png", "'..' climbs out"),
        ("s3://PHOTOS-other/set1/a.png", "another bucket"),
        ("s3://photos/set10/a.png", "not under the root"),
        ("https://photos/set1/a.png", "another scheme"),
    ):
        reason = refusal(policy, location)
        assert reason.startswith("escapes --root s3://photos/set1") and why in reason, reason
    web = AccessPolicy.for_source(root="http://127.0.0.1:18081/photos")
    web.admit("http://127.0.0.1:18081/photos/a.png")  # named: loopback is fine
    reason = refusal(
        web,
        "http://127.0.0.1:18082/photos/a.png",
        redirected_from="http://127.0.0.1:18081/photos/a.png",
    )
    assert reason.startswith("redirects to http://127.0.0.1:18082/photos/a.png: escapes --root")
    local = AccessPolicy.for_source(root=tmp_path)
    local.admit(str(tmp_path / "a.png"))
    assert "escapes --root" in refusal(local, str(tmp_path.parent / "b.png"))
    assert "escapes --root" in refusal(local, f"{tmp_path}/../b.png")


def test_the_caller_names_what_it_reads_but_not_where_it_is_redirected() -> None:
    ambient = AccessPolicy.ambient()
    ambient.admit("http://127.0.0.1:9/x.png")  # `assess http://127.0.0.1:9/x.png`
    ambient.admit("s3://any-bucket/x.png")
    ambient.admit("http://127.0.0.1:9/y.png", redirected_from="http://127.0.0.1:9/x.png")
    assert "loopback address" in refusal(
        ambient, "http://127.0.0.1:10/y.png", redirected_from="http://127.0.0.1:9/x.png"
    )
    assert "not an http(s) URL" in refusal(
        ambient, "file:///etc/passwd", redirected_from="http://127.0.0.1:9/x.png"
    )
    assert "user or password" in refusal(ambient, "https://user:pw@example.org/x.png")


def test_the_store_endpoint_is_a_named_host(monkeypatch: pytest.MonkeyPatch) -> None:
    location = "http://127.0.0.1:9000/bucket/a.png"
    assert "loopback" in refusal(OPTED_IN, location)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    OPTED_IN.admit(location)
    assert "loopback" in refusal(OPTED_IN, "http://127.0.0.1:9001/bucket/a.png")


def test_the_allow_list_names_schemes_hosts_buckets_and_prefixes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "AGENTIC_IQA_ALLOWED_LOCATIONS", "s3://team/photos/, gs:  *.cdn.example.org,10.0.0.5"
    )
    policy = AccessPolicy.for_source()
    assert policy.allowed == ("s3://team/photos/", "gs:", "*.cdn.example.org", "10.0.0.5")
    for location in (
        "s3://team/photos/a.png",
        "gs://anything/a.png",
        "http://10.0.0.5:9000/a.png",
        "https://10.0.0.5/a.png",
    ):
        policy.admit(location)
    for location in (
        "s3://team/photos/../private/a.png",
        "s3://team/photo/a.png",
        "s3://team/photos%2f..%2fprivate/a.png",
        "s3://other/photos/a.png",
        "https://cdn.example.org/a.png",
        "http://10.0.0.6/a.png",
    ):
        assert "read only where the user named it" in refusal(policy, location), location
    monkeypatch.setenv("AGENTIC_IQA_ALLOWED_LOCATIONS", "img.cdn.example.org")
    assert "loopback" not in refusal(AccessPolicy.for_source(), "https://other.example.org/a")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("file:///data", "file:// is read only"),
        ("file", "file:// is read only"),
        ("ftp://host/x", "unsupported scheme"),
        ("https://u:p@host/x", "no user, password"),
        ("host/path", "neither a scheme, a host, nor a URL"),
        ("host:http", "not a number"),
    ],
)
def test_a_bad_allow_list_entry_stops_in_one_line(entry: str, why: str) -> None:
    with pytest.raises(StorageMisconfigured, match=why) as caught:
        AccessPolicy.for_source(allowed=(entry,))
    assert "AGENTIC_IQA_ALLOWED_LOCATIONS" in str(caught.value)
    assert caught.value.stops_job


def test_a_reading_keeps_its_failures_and_its_digests() -> None:
    scope = Reading(OPTED_IN, {"s3://b/k.png": "etag:1"})
    scope.failed(
        "s3://b/gone.png", ObjectMissing("object s3://b/gone.png not found", "s3://b/gone.png")
    )
    with reading(scope):
        assert access.expected_digest("s3://b/k.png") == "etag:1"
        with pytest.raises(ObjectMissing, match="not found"):
            access.current().admit("s3://b/gone.png")
        access.current().admit("s3://b/k.png")
    assert access.expected_digest("s3://b/k.png") is None
    assert access.current().policy == AccessPolicy.ambient()


def test_a_policy_survives_the_jobs_record() -> None:
    policy = AccessPolicy.for_source(
        root="s3://photos/set1",
        image_dir="s3://photos/set1",
        allow_urls=True,
        allowed=("https://cdn.example.org",),
    )
    assert AccessPolicy.model_validate_json(policy.model_dump_json()) == policy
