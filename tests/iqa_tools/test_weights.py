import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iqa_tools import ToolRegistry, ToolSettings, ToolUnavailableError, load_catalog
from iqa_tools import weights as weight_files


def test_torch_hub_dir_matches_torch(monkeypatch, tmp_path):
    import torch

    assert weight_files.torch_hub_dir() == Path(torch.hub.get_dir())
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    assert weight_files.torch_hub_dir() == Path(torch.hub.get_dir()) == tmp_path / "hub"


def test_weight_free_tools_are_available_and_weighted_ones_name_their_files(tmp_path):
    registry = ToolRegistry(ToolSettings(tool_cache="memory"))
    assert registry.availability("SSIM").status == "weight-free"
    niqe = registry.availability("NIQE")
    assert niqe.status == "missing"
    assert "niqe_modelparameters.mat" in niqe.detail
    assert str(weight_files.location_dir("pyiqa")) in niqe.detail
    assert "install-weights" in niqe.detail
    assert "run `agentic-iqa tools download NIQE` to fetch it into" in niqe.detail
    lpips = registry.availability("LPIPS")
    assert {w.file for w in lpips.missing} == {
        "LPIPS_v0.1_alex-df73285e.pth",
        "alexnet-owt-7be5be79.pth",
    }
    assert str(weight_files.location_dir("torch_hub")) in lpips.detail
    topiq = registry.availability("TOPIQ_FR")
    assert "HF timm/resnet50.a1_in1k" in topiq.summary


def test_offline_tool_set(tmp_path):
    registry = ToolRegistry(ToolSettings(tool_cache="memory"))
    runnable = {spec.name for spec in registry.catalog if registry.availability(spec.name).ok}
    assert runnable == {"FSIM", "MS-SSIM", "GMSD", "SSIM", "VIF", "PSNR", "VSI", "PIQE"}


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("icecream") is not None,
    reason="icecream is installed here",
)
def test_missing_python_package_is_reported():
    availability = ToolRegistry(ToolSettings(tool_cache="memory")).availability("QAlign")
    assert not availability.ok
    assert availability.missing_packages == ("icecream",)
    assert "pip install icecream" in availability.detail


def test_allow_downloads_marks_missing_files_downloadable():
    registry = ToolRegistry(ToolSettings(tool_cache="memory", allow_downloads=True))
    assert registry.availability("NIQE").status == "downloadable"
    assert registry.availability("NIQE").ok


def test_weights_dir_makes_a_tool_ready(weights_dir):
    registry = ToolRegistry(ToolSettings(tool_cache="memory", weights_dir=weights_dir))
    availability = registry.availability("BRISQUE")
    assert availability.status == "ready"
    assert availability.found["brisque_svm_weights.pth"] == weights_dir / "brisque_svm_weights.pth"


def test_missing_weights_fail_fast_without_touching_pyiqa(photo):
    """The check is a file look-up: no import of torch/pyiqa, no download attempt."""
    code = (
        "import sys; from iqa_tools import ToolRegistry, ToolSettings, ToolUnavailableError\n"
        "r = ToolRegistry(ToolSettings(tool_cache='memory'))\n"
        f"try: r.execute_tool('LPIPS', {str(photo)!r}, {str(photo)!r}, allow_fallback=False)\n"
        "except ToolUnavailableError as e: print(e)\n"
        "print('pyiqa' in sys.modules, 'torch' in sys.modules)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert output[0].startswith("LPIPS cannot run here: missing LPIPS_v0.1_alex-df73285e.pth")
    assert output[1] == "False False"


@pytest.mark.slow
def test_install_weights_then_run_from_pyiqa_cache(weights_dir, tmp_path, photo):
    env = {
        **os.environ,
        "TORCH_HOME": str(tmp_path / "torch"),
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
    }
    cli = [sys.executable, "-m", "agentic_iqa", "tools"]
    install = subprocess.run(
        [*cli, "install-weights", str(weights_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0, install.stderr
    installed = tmp_path / "torch" / "hub" / "pyiqa"
    assert (installed / "niqe_modelparameters.mat").is_file()
    assert (installed / "brisque_svm_weights.pth").is_file()
    assert "2 weight file(s) in place" in install.stdout

    run = subprocess.run(
        [*cli, "run", "NIQE", str(photo), "--json", "--no-fallback"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    from_cache = json.loads(run.stdout)
    direct = ToolRegistry(
        ToolSettings(tool_cache="memory", device="cpu", weights_dir=weights_dir)
    ).execute_tool("NIQE", photo)
    assert from_cache["tool"] == "NIQE" and not from_cache["fallback"]
    assert from_cache["raw_score"] == pytest.approx(direct.raw_score, rel=1e-6)


def test_install_weights_rejects_a_folder_without_known_files(tmp_path):
    (tmp_path / "README.txt").write_text("nothing useful")
    with pytest.raises(NotADirectoryError):
        weight_files.install_weights(tmp_path / "nope", load_catalog())
    installed, unknown = weight_files.install_weights(tmp_path, load_catalog())
    assert installed == [] and unknown == ["README.txt"]


def test_unavailable_error_type():
    registry = ToolRegistry(ToolSettings(tool_cache="memory"))
    with pytest.raises(ToolUnavailableError, match="niqe_modelparameters.mat"):
        registry.metric("NIQE")
