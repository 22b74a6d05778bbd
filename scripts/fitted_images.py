"""Write agentic_iqa/vlm/builtin/fitted_images.json: the SHA-256 of every image the builtin
backend's shipped parameters were fitted or tuned on.

``eval compare`` reads it to warn when a job's items are such images: the builtin's figures on
them are in-sample, whatever the job's manifest calls them.  Hashes of the bytes, not names,
so a copy under another name is still recognised (and a re-encoded copy is not: the warning is
a floor, not a proof of independence).

What counts (see benchmarks/agent_quality.py and opinion.json's and severity.json's metadata):
all of LIVE-C dev.  ``--fit`` fits the opinion models on its FIT part and calibrates the
severity thresholds, detectors and which-distortion model on copies of FIT photos degraded by
the calibration generator (generated images are not hashed: their source photos are); the
HELD-OUT part was looked at while the features and generators were tuned, so it counts too.
The fitting reads neither tid2013-calibration (it checks how tools load images) nor
livec-extra.  Run it again after a new ``--fit`` on other data, and add that data here.

    python scripts/fitted_images.py ../shared/data        # or AGENTIC_IQA_DATA_DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

BUILTIN = Path(__file__).resolve().parent.parent / "agentic_iqa" / "vlm" / "builtin"
OUTPUT = BUILTIN / "fitted_images.json"
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
NOTE = (
    "SHA-256 of the bytes of every image file the builtin backend's shipped parameters "
    "(opinion.json, severity.json) were fitted or tuned on, written by "
    "scripts/fitted_images.py; `agentic-iqa eval compare` warns when a job using the "
    "builtin backend scores such images, since its figures on them are in-sample. "
    "tid2013-calibration and livec-extra are not read by the fitting and are not listed."
)


def livec_description(fit: int, held_out: int) -> str:
    return (
        f"LIVE-C dev, every photo (500x500 JPEG). opinion.json: ridge models fitted on its "
        f"FIT part ({fit} photos, split by a hash of the file name) by "
        f"benchmarks/agent_quality.py --fit. severity.json: thresholds, detectors and the "
        f"which-distortion model calibrated on copies of FIT photos degraded by the "
        f"calibration generator (agentic_iqa.fitting.degradations); those generated images "
        f"are not hashed, their source photos are. The HELD-OUT part ({held_out} photos) "
        f"was looked at while features and generators were tuned, so all count as "
        f"in-sample."
    )


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def build(data_dir: Path) -> dict:
    """The document for ``data_dir`` (the shared data folder, holding livec-dev/)."""
    metadata = json.loads((BUILTIN / "opinion.json").read_text(encoding="utf-8"))["metadata"]
    fit, held_out = metadata["fit_photos"], metadata["held_out_photos"]
    images = sorted(
        path
        for path in (data_dir / "livec-dev" / "images").iterdir()
        if path.suffix.lower() in IMAGE_SUFFIXES
    )
    if len(images) != fit + held_out:
        sys.exit(
            f"{data_dir / 'livec-dev' / 'images'} holds {len(images)} images, but the "
            f"shipped parameters name {fit} FIT + {held_out} HELD-OUT photos: not the "
            "data they were fitted on"
        )
    hashes = {sha256_of(path): f"livec-dev/{path.name}" for path in images}
    if len(hashes) != len(images):
        print(f"note: {len(images) - len(hashes)} images repeat another's bytes", file=sys.stderr)
    return {
        "note": NOTE,
        "sets": {
            "livec-dev": {"description": livec_description(fit, held_out), "count": len(images)}
        },
        "sha256": dict(sorted(hashes.items())),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "data_dir",
        type=Path,
        nargs="?",
        default=os.environ.get("AGENTIC_IQA_DATA_DIR"),
        help="the shared data folder, with livec-dev/ (default: AGENTIC_IQA_DATA_DIR)",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if args.data_dir is None:
        parser.error("give the data folder, or set AGENTIC_IQA_DATA_DIR")
    document = build(Path(args.data_dir))
    args.output.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"{len(document['sha256'])} images -> {args.output}")


if __name__ == "__main__":
    main()
