"""``agentic-iqa tools download``: weights on demand, against a real HTTP server on localhost.

The server serves a folder holding copies of the shared NIQE/BRISQUE parameter files; the tool
metadata's URLs are pointed at it with a metadata override (``AGENTIC_IQA_METADATA_OVERRIDES``),
the mechanism users have for their own mirrors.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from iqa_tools import ToolRegistry, ToolSettings, UnknownToolError, download, load_catalog

runner = CliRunner()
NIQE = "niqe_modelparameters.mat"
BRISQUE = "brisque_svm_weights.pth"


@dataclass
class Served:
    """What the test server does, and what it was asked."""

    root: Path
    honour_range: bool = True
    #: Send only this many bytes of a full (200) answer, then drop the connection.
    cut_after: int | None = None
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    url: str = ""


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        served: Served = self.server.served  # type: ignore[attr-defined]
        wanted = self.headers.get("Range")
        served.requests.append((self.path, wanted))
        path = served.root / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        match = re.fullmatch(r"bytes=(\d+)-", wanted or "") if served.honour_range else None
        if match is not None:
            start = int(match.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = data[start:]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if served.cut_after is not None and match is None:
            self.wfile.write(body[: served.cut_after])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path, weights_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A local HTTP server holding copies of the shared NIQE and BRISQUE files."""
    root = tmp_path / "served"
    root.mkdir()
    for name in (NIQE, BRISQUE):
        shutil.copy(weights_dir / name, root / name)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    served = Served(root, url=f"http://127.0.0.1:{httpd.server_address[1]}")
    httpd.served = served  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield served
    httpd.shutdown()
    httpd.server_close()


def mirror(
    served: Served, tmp_path: Path, paths: dict[str, str] | None = None, **weight_fields: object
) -> Path:
    """A metadata override pointing NIQE's and BRISQUE's URLs at the test server."""
    paths = paths or {}
    tools = {}
    for tool in ("NIQE", "BRISQUE"):
        weights = []
        for weight in load_catalog().get(tool).weights:
            document = weight.model_dump()
            document["url"] = f"{served.url}/{paths.get(weight.file, weight.file)}"
            document.update(weight_fields)
            weights.append(document)
        tools[tool] = {"weights": weights}
    path = tmp_path / "mirror.json"
    path.write_text(json.dumps({"tools": tools}), encoding="utf-8")
    return path


def cli_env(tmp_path: Path, override: Path, **extra: str) -> dict[str, str]:
    return {
        "TORCH_HOME": str(tmp_path / "torch"),
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "COLUMNS": "80",
        "AGENTIC_IQA_METADATA_OVERRIDES": json.dumps([str(override)]),
        **extra,
    }


def pyiqa_cache(tmp_path: Path) -> Path:
    return tmp_path / "torch" / "hub" / "pyiqa"


# -- the metadata --------------------------------------------------------------------------------


def test_every_downloadable_file_has_a_licence_and_known_hashes_are_recorded(weights_dir):
    catalog = load_catalog()
    for spec in catalog:
        for weight in spec.weights:
            if weight.url:
                assert weight.licence, (spec.name, weight.file)
                assert weight.licence.startswith("unknown, see https://") or "MIT" in weight.licence
    for tool, name in (("NIQE", NIQE), ("BRISQUE", BRISQUE)):
        (weight,) = catalog.get(tool).weights
        assert weight.sha256 == download.sha256_of(weights_dir / name)
    # OpenAI's CLIP URLs carry the file's sha256, which pyiqa's CLIP loader checks too.
    (clip,) = catalog.get("CLIPIQA").weights
    assert clip.sha256 == clip.url.split("/")[-2]


def test_paper_set_and_errors_for_names_that_cannot_be_served():
    catalog = load_catalog()
    paper = {spec.name for spec in download.select_tools(catalog, [], paper=True)}
    assert paper == {spec.name for spec in catalog if spec.from_paper}
    assert "PIQE" not in paper and len(paper) == 28
    with pytest.raises(download.DownloadError, match="name the tools"):
        download.select_tools(catalog, [])
    with pytest.raises(download.DownloadError, match="SSIM needs no weight files"):
        download.select_tools(catalog, ["ssim"])
    with pytest.raises(download.DownloadError, match="huggingface-cli download q-future/one-align"):
        download.select_tools(catalog, ["QAlign"])
    with pytest.raises(UnknownToolError, match="'NIQ'"):
        download.select_tools(catalog, ["NIQ"])


def test_plan_fetches_a_shared_backbone_once_and_names_hub_models(tmp_path):
    catalog = load_catalog()
    plan = download.plan(download.select_tools(catalog, ["DISTS", "DBCNN", "TOPIQ_FR"]), tmp_path)
    names = [task.weight.file for task in plan.files]
    assert names.count("vgg16-397923af.pth") == 1
    (vgg,) = [task for task in plan.files if task.weight.file == "vgg16-397923af.pth"]
    assert vgg.tools == ("DISTS", "DBCNN") and vgg.destination == tmp_path / vgg.weight.file
    assert [(m.repo, m.tools) for m in plan.hub_models] == [
        ("timm/resnet50.a1_in1k", ("TOPIQ_FR",))
    ]


# -- fetching ------------------------------------------------------------------------------------


def test_fresh_download_then_present(server, tmp_path, weights_dir):
    expected = download.sha256_of(weights_dir / NIQE)
    target = tmp_path / "out" / NIQE
    seen: list[tuple[int, int | None]] = []
    fetched = download.fetch(
        f"{server.url}/{NIQE}",
        target,
        sha256=expected,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert fetched.action == "downloaded" and fetched.verified and fetched.sha256 == expected
    assert target.read_bytes() == (weights_dir / NIQE).read_bytes()
    assert not target.with_name(NIQE + ".part").exists()
    assert seen[-1] == (target.stat().st_size, target.stat().st_size)
    task = download.FileTask(load_catalog().get("NIQE").weights[0], ("NIQE",), target)
    again = download.ensure(task)
    assert again.action == "present" and again.verified
    assert len(server.requests) == 1  # a good copy is not fetched again


def test_an_interrupted_download_resumes_from_the_part_file(server, tmp_path, weights_dir):
    data = (weights_dir / BRISQUE).read_bytes()
    expected = download.sha256_of(weights_dir / BRISQUE)
    target = tmp_path / BRISQUE
    part = tmp_path / (BRISQUE + ".part")
    server.cut_after = 40_000
    with pytest.raises(download.DownloadError, match="run the same command again to resume"):
        download.fetch(f"{server.url}/{BRISQUE}", target, sha256=expected)
    assert part.stat().st_size == 40_000 and not target.exists()
    server.cut_after = None
    fetched = download.fetch(f"{server.url}/{BRISQUE}", target, sha256=expected)
    assert fetched.action == "resumed" and fetched.verified
    assert server.requests[-1] == (f"/{BRISQUE}", "bytes=40000-")
    assert target.read_bytes() == data and not part.exists()


def test_a_server_that_ignores_range_is_followed_from_the_start(server, tmp_path, weights_dir):
    data = (weights_dir / BRISQUE).read_bytes()
    target = tmp_path / BRISQUE
    target.with_name(BRISQUE + ".part").write_bytes(data[:1000])
    server.honour_range = False
    fetched = download.fetch(
        f"{server.url}/{BRISQUE}", target, sha256=download.sha256_of(weights_dir / BRISQUE)
    )
    assert server.requests[-1][1] == "bytes=1000-"  # asked, ignored: the whole file came
    assert fetched.action == "downloaded" and target.read_bytes() == data


def test_a_complete_part_file_is_finished_without_a_body(server, tmp_path, weights_dir):
    data = (weights_dir / NIQE).read_bytes()
    target = tmp_path / NIQE
    target.with_name(NIQE + ".part").write_bytes(data)
    fetched = download.fetch(
        f"{server.url}/{NIQE}", target, sha256=download.sha256_of(weights_dir / NIQE)
    )
    assert fetched.action == "resumed" and target.read_bytes() == data


def test_checksum_mismatch_deletes_the_download(server, tmp_path, weights_dir):
    target = tmp_path / NIQE
    with pytest.raises(download.ChecksumError, match="sha256 mismatch.*deleted"):
        download.fetch(
            f"{server.url}/{BRISQUE}", target, sha256=download.sha256_of(weights_dir / NIQE)
        )
    assert list(tmp_path.iterdir()) == [server.root]


def test_unknown_hash_is_reported_unverified(server, tmp_path):
    fetched = download.fetch(f"{server.url}/{NIQE}", tmp_path / NIQE, sha256=None)
    assert fetched.verified is False and len(fetched.sha256) == 64


def test_a_wrong_copy_under_the_final_name_is_replaced(server, tmp_path, weights_dir):
    target = tmp_path / NIQE
    target.write_bytes(b"not the parameters")
    task = download.FileTask(
        load_catalog().get("NIQE").weights[0].model_copy(update={"url": f"{server.url}/{NIQE}"}),
        ("NIQE",),
        target,
    )
    fetched = download.ensure(task)
    assert fetched.replaced and fetched.verified
    assert target.read_bytes() == (weights_dir / NIQE).read_bytes()


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_downloads_into_pyiqas_cache_and_the_tools_then_run(
    server, tmp_path, weights_dir, photo
):
    env = cli_env(tmp_path, mirror(server, tmp_path))
    result = runner.invoke(app, ["tools", "download", "NIQE", "brisque"], env=env)
    assert result.exit_code == 0, result.output
    output = result.output
    cache = pyiqa_cache(tmp_path)
    for name in (NIQE, BRISQUE):
        assert (cache / name).read_bytes() == (weights_dir / name).read_bytes()
        assert "downloaded, " in output and f"sha256 verified -> {cache / name}" in output
    assert (
        output.count("licence  unknown, see https://huggingface.co/chaofengc/IQA-PyTorch-Weights")
        == 2
    )
    assert "2 of 2 file(s) in place: 2 verified, 0 unverified." in output
    assert "UNVERIFIED" not in output
    assert not list(cache.glob("*.part"))

    run = runner.invoke(app, ["tools", "run", "NIQE", str(photo), "--json"], env=env)
    assert run.exit_code == 0, run.output
    score = json.loads(run.stdout)
    direct = ToolRegistry(
        ToolSettings(tool_cache="memory", device="cpu", weights_dir=weights_dir)
    ).execute_tool("NIQE", photo)
    assert score["tool"] == "NIQE" and not score["fallback"]
    assert score["raw_score"] == pytest.approx(direct.raw_score, rel=1e-9)

    again = runner.invoke(app, ["tools", "download", "NIQE"], env=env)
    assert again.exit_code == 0 and "already there" in again.output
    assert len(server.requests) == 2


def test_cli_dir_option_and_weights_dir_setting(server, tmp_path, weights_dir, photo):
    env = cli_env(tmp_path, mirror(server, tmp_path))
    folder = tmp_path / "carry"
    result = runner.invoke(app, ["tools", "download", "BRISQUE", "--dir", str(folder)], env=env)
    assert result.exit_code == 0, result.output
    assert (folder / BRISQUE).is_file() and not pyiqa_cache(tmp_path).exists()
    assert f"set AGENTIC_IQA_WEIGHTS_DIR={folder}" in result.output

    settings_dir = tmp_path / "weights"
    env["AGENTIC_IQA_WEIGHTS_DIR"] = str(settings_dir)
    result = runner.invoke(app, ["tools", "download", "BRISQUE"], env=env)
    assert result.exit_code == 0, result.output
    assert (settings_dir / BRISQUE).is_file()
    assert "AGENTIC_IQA_WEIGHTS_DIR=" not in result.output  # already where the tools look
    run = runner.invoke(app, ["tools", "run", "BRISQUE", str(photo), "--json"], env=env)
    assert run.exit_code == 0, run.output
    direct = ToolRegistry(
        ToolSettings(tool_cache="memory", device="cpu", weights_dir=weights_dir)
    ).execute_tool("BRISQUE", photo)
    assert json.loads(run.stdout)["raw_score"] == pytest.approx(direct.raw_score, rel=1e-9)


def test_cli_resumes_after_an_interrupted_run(server, tmp_path, weights_dir):
    env = cli_env(tmp_path, mirror(server, tmp_path))
    server.cut_after = 50_000
    first = runner.invoke(app, ["tools", "download", "BRISQUE"], env=env)
    assert first.exit_code == 1
    (line,) = [x for x in first.output.splitlines() if x.startswith("error:")]
    assert "stopped after 50000 of 116421 bytes" in line and "again to resume" in line
    assert not (pyiqa_cache(tmp_path) / BRISQUE).exists()
    server.cut_after = None
    second = runner.invoke(app, ["tools", "download", "BRISQUE"], env=env)
    assert second.exit_code == 0, second.output
    assert "resumed and completed" in second.output and "sha256 verified" in second.output
    assert server.requests[-1][1] == "bytes=50000-"
    assert (pyiqa_cache(tmp_path) / BRISQUE).read_bytes() == (weights_dir / BRISQUE).read_bytes()


def test_cli_checksum_mismatch_is_one_error_line_and_leaves_no_file(server, tmp_path):
    # The mirror serves BRISQUE's file under NIQE's URL: the hash gives it away.
    env = cli_env(tmp_path, mirror(server, tmp_path, paths={NIQE: BRISQUE}))
    result = runner.invoke(app, ["tools", "download", "NIQE"], env=env)
    assert result.exit_code == 1
    errors = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "niqe_modelparameters.mat: sha256 mismatch" in errors[0]
    assert "0 of 1 file(s) in place" in result.output
    cache = pyiqa_cache(tmp_path)
    assert not (cache / NIQE).exists() and not (cache / (NIQE + ".part")).exists()


def test_cli_404_is_one_error_line_and_other_files_still_come(server, tmp_path):
    env = cli_env(tmp_path, mirror(server, tmp_path, paths={NIQE: "gone/" + NIQE}))
    result = runner.invoke(app, ["tools", "download", "NIQE", "BRISQUE"], env=env)
    assert result.exit_code == 1
    (error,) = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert error == (f"error: {NIQE}: HTTP 404 Not Found from {server.url}/gone/{NIQE}")
    assert (pyiqa_cache(tmp_path) / BRISQUE).is_file()
    assert not (pyiqa_cache(tmp_path) / NIQE).exists()


def test_cli_says_when_a_file_is_unverified(server, tmp_path):
    env = cli_env(tmp_path, mirror(server, tmp_path, sha256=None, licence=None))
    result = runner.invoke(app, ["tools", "download", "NIQE"], env=env)
    assert result.exit_code == 0, result.output
    assert "UNVERIFIED (no sha256 recorded in the tool metadata)" in result.output
    assert "sha256 verified" not in result.output
    assert f"licence  unknown, see {server.url}/{NIQE}" in result.output
    assert "0 verified, 1 unverified" in result.output


@pytest.mark.parametrize(
    "arguments, message",
    [
        ([], "error: name the tools whose weights to fetch"),
        (["NOPE"], "error: unknown tool 'NOPE'"),
        (["PSNR"], "error: PSNR needs no weight files (it is weight-free): nothing to download"),
    ],
)
def test_cli_usage_errors_are_one_line_and_fetch_nothing(arguments, message, tmp_path):
    result = runner.invoke(
        app, ["tools", "download", *arguments], env={"TORCH_HOME": str(tmp_path / "torch")}
    )
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(message)
    assert not (tmp_path / "torch").exists()


# -- no sha256: the file's form is checked, and sizes before a byte is written ------------------


def test_a_web_page_served_for_an_unhashed_file_is_never_in_place(server, tmp_path, weights_dir):
    """A 39-byte HTML page where the file should be: refused, not reported "in place"; a
    later download from a good server replaces a bad copy found under the final name."""
    (server.root / "moved.mat").write_bytes(b"<!DOCTYPE html><html>moved</html>\n\n\n\n")
    env = cli_env(tmp_path, mirror(server, tmp_path, paths={NIQE: "moved.mat"}, sha256=None))
    result = runner.invoke(app, ["tools", "download", "NIQE"], env=env)
    assert result.exit_code == 1
    assert "is not the file: it is a web page" in " ".join(result.output.split())
    destination = pyiqa_cache(tmp_path) / NIQE
    assert not destination.exists() and not destination.with_name(NIQE + ".part").exists()

    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(b"<html>a page saved by hand</html>")
    listed = runner.invoke(app, ["tools", "list", "--json"], env=env)
    niqe = next(row for row in json.loads(listed.stdout) if row["name"] == "NIQE")
    assert niqe["status"] != "ready"
    good = cli_env(tmp_path, mirror(server, tmp_path, sha256=None))
    again = runner.invoke(app, ["tools", "download", "NIQE"], env=good)
    assert again.exit_code == 0, again.output
    assert destination.read_bytes() == (weights_dir / NIQE).read_bytes()


class _NoLength(_Handler):
    """Sends half the file with no Content-Length, then closes: a truncated body."""

    def do_GET(self) -> None:  # noqa: N802
        served = self.server.served  # type: ignore[attr-defined]
        data = (served.root / self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.close_connection = True


class _Huge(_Handler):
    """Announces 50 GB."""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(50 * 10**9))
        self.end_headers()
        self.close_connection = True


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        (_NoLength, "it is a truncated zip archive"),
        (_Huge, "announces 46.6 GiB, more than any weight file"),
    ],
)
def test_a_truncated_or_oversized_unhashed_download_is_refused(
    handler, message, tmp_path, weights_dir, monkeypatch
):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    root = tmp_path / "served"
    root.mkdir()
    shutil.copy(weights_dir / BRISQUE, root / BRISQUE)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.served = Served(root)  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    target = tmp_path / "out" / BRISQUE
    try:
        with pytest.raises(download.DownloadError, match=message):
            download.fetch(f"http://127.0.0.1:{httpd.server_address[1]}/{BRISQUE}", target)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not target.exists() and not target.with_name(BRISQUE + ".part").exists()


def test_a_download_that_does_not_fit_on_the_disk_is_refused_before_writing(
    server, tmp_path, monkeypatch
):
    import shutil as real

    monkeypatch.setattr(
        download.shutil, "disk_usage", lambda _path: real._ntuple_diskusage(10**9, 10**9, 1000)
    )
    with pytest.raises(download.DownloadError, match="only 0 MiB free"):
        download.fetch(f"{server.url}/{NIQE}", tmp_path / "out" / NIQE)
    assert not (tmp_path / "out" / (NIQE + ".part")).exists()


# -- offline: the host cannot be reached ---------------------------------------------------------


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connecting is refused."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_cli_unreachable_host_names_the_folder_and_the_install_command(
    tmp_path, weights_dir, monkeypatch
):
    """Offline for real (a refused loopback port): the output says why, where copies are and
    which command installs them; nothing is installed by itself, and that command then works."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    host = f"127.0.0.1:{_closed_port()}"
    data = tmp_path / "data"
    shutil.copytree(weights_dir, data / "pyiqa-weights")
    env = cli_env(
        tmp_path,
        mirror(Served(tmp_path, url=f"http://{host}"), tmp_path),
        AGENTIC_IQA_DATA_DIR=str(data),
    )
    result = runner.invoke(app, ["tools", "download", "NIQE", "BRISQUE"], env=env)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    errors = [x for x in lines if x.startswith("error:")]
    assert len(errors) == 2
    for line, name in zip(errors, (NIQE, BRISQUE), strict=True):
        assert line.startswith(f"error: {name}: download from http://{host}/{name} failed: ")
        assert f"the host {host} cannot be reached (" in line
    folder = (data / "pyiqa-weights").resolve()
    assert (
        f"The download failed because {host} cannot be reached from this machine" in result.output
    )
    assert "nothing was installed in its place" in result.output
    assert (
        f"{NIQE} and {BRISQUE}: copies are in {folder}; install them with "
        f"`agentic-iqa tools install-weights {folder}`." in result.output
    )
    assert not pyiqa_cache(tmp_path).exists() or not any(pyiqa_cache(tmp_path).iterdir())
    # The command the message names does the job.
    installed = runner.invoke(app, ["tools", "install-weights", str(folder)], env=env)
    assert installed.exit_code == 0, installed.output
    assert (pyiqa_cache(tmp_path) / NIQE).read_bytes() == (weights_dir / NIQE).read_bytes()
    assert (pyiqa_cache(tmp_path) / BRISQUE).read_bytes() == (weights_dir / BRISQUE).read_bytes()


def test_the_offline_hint_without_a_copy_names_the_repository_folder_and_the_command(tmp_path):
    from agentic_iqa.cli.offline_weights import holding, unreachable_hint

    assert holding([NIQE], cwd=tmp_path) is not None  # the checkout's tests/data has it
    assert holding(["no_such_file.pth"], cwd=tmp_path) is None
    hint = unreachable_hint(["example.org", "example.org"], ["no_such_file.pth"], cwd=tmp_path)
    assert hint.splitlines() == [
        "The download failed because example.org cannot be reached from this machine (offline, "
        "or a proxy or firewall in the way); nothing was installed in its place.",
        "no_such_file.pth: download on a machine with network, copy the files into a folder DIR "
        "here and run `agentic-iqa tools install-weights DIR`.",
    ]
