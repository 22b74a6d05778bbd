"""Let torchvision import beside a torch whose build its compiled operators do not match.

PyPI's torchvision wheels for Linux are linked against torch's CUDA libraries, and no CPU build of
torchvision is on PyPI: beside a CPU-only torch its ``_C`` extension cannot load, and torchvision
then fails at import (``operator torchvision::nms does not exist``) because two of its fake-tensor
registrations do not check that the operators exist, as the others do. This applies that check to
those two, so that torchvision imports; what needs its compiled operators (``torchvision.ops``:
NMS, RoI pooling, deformable convolutions, used by pyiqa's AHIQ, PaQ-2-PiQ and IQT) raises when
called. With a matching pair (a CPU index's torchvision, or the CUDA pair) it changes nothing.

Run by the Dockerfile after torch and torchvision are installed; exits non-zero when torchvision
still does not import.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

MISSING = "torchvision::nms does not exist"
GUARD = '''

def _register_fake_if_ops(name):
    """Register a fake kernel only when torchvision's compiled operators loaded."""
    if torchvision.extension._has_ops():
        return torch.library.register_fake(name)
    return lambda fn: fn
'''


def imports() -> subprocess.CompletedProcess[str]:
    """Import torchvision in a fresh interpreter."""
    code = "import warnings; warnings.simplefilter('ignore'); import torchvision"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def main() -> int:
    """Patch torchvision when it fails the way described above; say what was done."""
    first = imports()
    if first.returncode == 0:
        print("torchvision imports: nothing to do")
        return 0
    if MISSING not in first.stderr:
        print(first.stderr, file=sys.stderr)
        return 1
    spec = importlib.util.find_spec("torchvision")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).with_name("_meta_registrations.py")
    text = path.read_text(encoding="utf-8")
    anchor = "import torchvision.extension  # noqa: F401\n"
    if anchor not in text:
        print(f"{path}: unexpected layout, not patched", file=sys.stderr)
        return 1
    text = text.replace(anchor, anchor + GUARD, 1)
    text = text.replace("@torch.library.register_fake(", "@_register_fake_if_ops(")
    path.write_text(text, encoding="utf-8")
    second = imports()
    if second.returncode != 0:
        print(second.stderr, file=sys.stderr)
        return 1
    print("torchvision imports without its compiled operators (torchvision.ops unavailable)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
