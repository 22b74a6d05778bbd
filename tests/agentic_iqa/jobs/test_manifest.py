"""Manifests: CSV, JSONL and folders streamed as checked items, bad rows as errors in the stream."""

from __future__ import annotations

import csv
import json
import math
import os
import tracemalloc
from pathlib import Path

import pytest
from PIL import Image

from agentic_iqa.jobs.manifest import (
    ManifestError,
    ManifestFormatError,
    ManifestItem,
    bad_row_key,
    count_rows,
    read_manifest,
)
from iqa_tools.images import MIN_IMAGE_SIDE
from tests.agentic_iqa.conftest import write_csv


def make_image(
    path: Path,
    color: tuple[int, int, int] = (120, 80, 40),
    size: tuple[int, int] = (MIN_IMAGE_SIDE, MIN_IMAGE_SIDE + 8),
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def errors(entries: list) -> dict[int, str]:
    return {e.line: e.message for e in entries if isinstance(e, ManifestError)}


def test_csv_rows_become_items_with_resolved_paths_and_typed_fields(tmp_path: Path) -> None:
    make_image(tmp_path / "imgs" / "a.png")
    make_image(tmp_path / "imgs" / "b.jpg")
    make_image(tmp_path / "refs" / "a.png")
    manifest = write_csv(
        tmp_path / "m.csv",
        ["image", "reference", "query", "mos", "answer", "id", "camera"],
        [
            ["imgs/a.png", "refs/a.png", "Is it blurry?", "3.25", "b", "", "x"],
            ["./imgs/b.jpg", "", "", "", "", "second", "y"],
        ],
    )
    items = list(read_manifest(manifest))
    assert all(isinstance(i, ManifestItem) for i in items)
    first, second = items
    # A row with its own question is keyed by image and question: one image, many questions.
    assert first.line == 2 and first.item_id.startswith("imgs/a.png#")
    assert first.item_id == next(iter(read_manifest(manifest))).item_id
    assert first.image == (tmp_path / "imgs" / "a.png").resolve()
    assert first.reference == (tmp_path / "refs" / "a.png").resolve()
    assert (first.query, first.mos, first.answer) == ("Is it blurry?", 3.25, "B")
    assert first.extra == {"camera": "x"}
    assert second.line == 3 and second.item_id == "second"
    assert (second.reference, second.query, second.mos, second.answer) == (None,) * 4


def test_csv_header_is_case_insensitive_and_tolerates_a_byte_order_mark(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    (tmp_path / "m.csv").write_text("\ufeffImage, MOS\na.png,4\n", encoding="utf-8")
    (item,) = read_manifest(tmp_path / "m.csv")
    assert isinstance(item, ManifestItem) and item.mos == 4.0 and item.item_id == "a.png"


def test_derived_ids_normalise_the_path_so_duplicates_are_caught(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    manifest = write_csv(tmp_path / "m.csv", ["image"], [["a.png"], ["./a.png"]])
    first, second = read_manifest(manifest)
    assert isinstance(first, ManifestItem)
    assert second == ManifestError(3, None, "duplicate id 'a.png' on line 3: first used on line 2")


def test_a_quoted_field_over_two_lines_keeps_later_line_numbers_right(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    make_image(tmp_path / "b.png")
    (tmp_path / "m.csv").write_text(
        'image,query\na.png,"Rate\nthis"\nb.png,\n\nmissing.png,\n', encoding="utf-8"
    )
    entries = list(read_manifest(tmp_path / "m.csv"))
    assert [e.line for e in entries] == [2, 4, 6]
    assert entries[0].query == "Rate\nthis"
    assert errors(entries) == {
        6: f"image 'missing.png' on line 6 not found (looked for "
        f"{tmp_path.resolve() / 'missing.png'})"
    }
    assert count_rows(tmp_path / "m.csv") == 3


def test_every_kind_of_bad_csv_row_is_an_error_with_its_line(tmp_path: Path) -> None:
    make_image(tmp_path / "ok.png")
    make_image(tmp_path / "ok2.png")
    (tmp_path / "broken.png").write_bytes(b"this is not a PNG")
    (tmp_path / "folder.png").mkdir()
    manifest = write_csv(
        tmp_path / "m.csv",
        ["image", "mos", "answer", "id"],
        [
            ["", "1", "", "no-image"],  # 2
            ["gone.png", "", "", ""],  # 3
            ["broken.png", "", "", ""],  # 4
            ["ok.png", "abc", "", "m1"],  # 5
            ["ok.png", "nan", "", "m2"],  # 6
            ["ok.png", "inf", "", "m3"],  # 7
            ["ok.png", "", "Z", "m4"],  # 8
            ["ok.png", "2", "A", "dup"],  # 9
            ["ok2.png", "", "", "dup"],  # 10
            ["ok.png", "", "", "m5", "surplus"],  # 11
            ["folder.png", "", "", ""],  # 12
        ],
    )
    entries = list(read_manifest(manifest))
    assert errors(entries) == {
        2: "line 2 has no image",
        3: f"image 'gone.png' on line 3 not found (looked for {tmp_path.resolve()}/gone.png)",
        4: errors(entries)[4],
        5: "mos 'abc' on line 5 is not a number",
        6: "mos 'nan' on line 6 is not a finite number",
        7: "mos 'inf' on line 7 is not a finite number",
        8: "answer 'Z' on line 8 is not a letter A-H",
        10: "duplicate id 'dup' on line 10: first used on line 9",
        11: "line 11 has 5 fields but the header has 4",
        12: "image 'folder.png' on line 12 is not a file",
    }
    assert errors(entries)[4].startswith("image 'broken.png' on line 4 is not a readable image")
    (good,) = [e for e in entries if isinstance(e, ManifestItem)]
    assert (good.line, good.item_id, good.mos, good.answer) == (9, "dup", 2.0, "A")
    ids = {e.line: e.item_id for e in entries if isinstance(e, ManifestError)}
    assert ids[2] == "no-image" and ids[5] == "m1" and ids[10] is None


def test_check_images_false_skips_decoding(tmp_path: Path) -> None:
    (tmp_path / "broken.png").write_bytes(b"not an image")
    manifest = write_csv(tmp_path / "m.csv", ["image"], [["broken.png"]])
    assert isinstance(next(read_manifest(manifest, check_images=False)), ManifestItem)
    assert isinstance(next(read_manifest(manifest)), ManifestError)


def test_jsonl_items_and_bad_lines(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    make_image(tmp_path / "b.png")
    lines = [
        json.dumps({"image": "a.png", "mos": 3.5, "id": 7, "query": None, "source": {"k": 1}}),
        "",
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"image": "b.png", "mos": True, "id": "bad-mos"}),
        json.dumps({"image": "b.png", "answer": "c", "query": "Which? A. x B. y C. z"}),
        json.dumps({"mos": 2}),
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    entries = list(read_manifest(path))
    first = entries[0]
    assert isinstance(first, ManifestItem)
    assert (first.line, first.item_id, first.mos, first.query) == (1, "7", 3.5, None)
    assert first.extra == {"source": {"k": 1}}
    found = errors(entries)
    assert found[3].startswith("line 3 is not valid JSON")
    assert found[4] == "line 4 is a JSON list, not an object"
    assert found[5] == "mos True on line 5 is not a number"
    assert found[7] == "line 7 has no image"
    last = [e for e in entries if isinstance(e, ManifestItem)][-1]
    assert (last.line, last.answer) == (6, "C") and last.item_id.startswith("b.png#")
    assert count_rows(path) == 6


def test_json_lines_extension_is_accepted(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    (tmp_path / "m.json-lines").write_text('{"image": "a.png"}\n', encoding="utf-8")
    assert [e.item_id for e in read_manifest(tmp_path / "m.json-lines")] == ["a.png"]


def test_a_folder_lists_top_level_images_sorted(tmp_path: Path) -> None:
    for name in ("b.JPG", "a.png", "c.webp"):
        make_image(tmp_path / name)
    make_image(tmp_path / "nested" / "d.png")
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "e.png").write_bytes(b"broken")
    entries = list(read_manifest(tmp_path))
    assert [e.line for e in entries] == [1, 2, 3, 4]
    assert [e.item_id for e in entries] == ["a.png", "b.JPG", "c.webp", "e.png"]
    assert all(isinstance(e, ManifestItem) for e in entries[:3])
    assert isinstance(entries[3], ManifestError)
    assert all(e.query is None and e.mos is None for e in entries[:3])
    assert count_rows(tmp_path) == 4


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("m.txt", "image\n", "unsupported extension '.txt'"),
        ("m.csv", "", "is empty"),
        ("m.csv", "path,mos\na.png,1\n", "has no 'image' column"),
        ("m.csv", "image,mos,MOS\n", "appear more than once"),
    ],
)
def test_a_malformed_file_raises_when_opened(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ManifestFormatError, match=message):
        read_manifest(path)  # no iteration needed: the whole file is refused up front


@pytest.mark.parametrize(
    ("header", "hint"),
    [
        (
            "image_name,c1,c2,c3,c4,c5,c_total,MOS,SD,MOS_zscore",
            "this looks like KonIQ-10k's score file (koniq10k_scores_and_distributions.csv): "
            "use `--dataset koniq10k --root DIR` instead of a manifest",
        ),
        (
            "image_name,c1,c2,c3,c4,c5,c_total,MOS,SD,set",
            "this looks like KonIQ-10k's score file (koniq10k_distributions_sets.csv): "
            "use `--dataset koniq10k --root DIR`",
        ),
        ("dist_img,ref_img,dmos,var", "KADID-10k's score file (dmos.csv): use `--dataset kadid10k"),
        (
            "name,prompt,adj1,adj2,style,mos_quality,std_quality,mos_align,std_align",
            "AGIQA-3K's score file (data.csv): use `--dataset agiqa3k --root DIR`",
        ),
    ],
)
def test_a_datasets_own_score_file_names_the_dataset_flags(
    tmp_path: Path, header: str, hint: str
) -> None:
    path = tmp_path / "scores.csv"
    path.write_text(header + "\nx.jpg,1,2,3,4,5,6,7,8,9\n", encoding="utf-8")
    with pytest.raises(ManifestFormatError) as caught:
        read_manifest(path)
    message = str(caught.value)
    assert "has no 'image' column; " in message
    assert hint in message


def test_an_unknown_header_gets_no_dataset_hint(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("path,MOS\na.png,1\n", encoding="utf-8")
    with pytest.raises(ManifestFormatError) as caught:
        read_manifest(path)
    assert str(caught.value).endswith("the header (path, MOS) has no 'image' column")


def test_a_missing_manifest_raises(tmp_path: Path) -> None:
    with pytest.raises(ManifestFormatError, match="not found"):
        read_manifest(tmp_path / "absent.csv")
    with pytest.raises(ManifestFormatError, match="not found"):
        count_rows(tmp_path / "absent.jsonl")


def test_root_confines_images_and_references(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = make_image(tmp_path / "outside.png")
    make_image(root / "in.png")
    (root / "escape.png").symlink_to(outside)
    (root / "inner-link.png").symlink_to(root / "in.png")
    manifest = write_csv(
        root / "m.csv",
        ["image", "reference", "id"],
        [
            ["../outside.png", "", "parent"],  # 2
            [str(outside), "", "absolute"],  # 3
            ["escape.png", "", "symlink"],  # 4
            ["in.png", "../outside.png", "reference"],  # 5
            ["inner-link.png", "", "fine-link"],  # 6
            ["../root/in.png", "", "fine-dots"],  # 7
        ],
    )
    entries = list(read_manifest(manifest, root=root))
    found = errors(entries)
    assert set(found) == {2, 3, 4, 5}
    assert all("path escapes --root" in message for message in found.values())
    assert found[5].startswith("reference '../outside.png' on line 5")
    good = [e for e in entries if isinstance(e, ManifestItem)]
    assert [(e.item_id, e.image) for e in good] == [
        ("fine-link", (root / "in.png").resolve()),
        ("fine-dots", (root / "in.png").resolve()),
    ]
    assert len([e for e in read_manifest(manifest) if isinstance(e, ManifestItem)]) == 6


def test_a_folder_manifest_is_confined_too(tmp_path: Path) -> None:
    outside = make_image(tmp_path / "outside.png")
    folder = tmp_path / "folder"
    make_image(folder / "a.png")
    (folder / "b.png").symlink_to(outside)
    entries = list(read_manifest(folder, root=folder))
    assert isinstance(entries[0], ManifestItem)
    assert "path escapes --root" in entries[1].message


def test_ten_thousand_rows_stream_in_flat_memory(tmp_path: Path) -> None:
    images = [make_image(tmp_path / f"{i}.png", (i * 40, 0, 0)) for i in range(3)]
    path = tmp_path / "big.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos", "id", "query"])
        for row in range(10_000):
            writer.writerow(
                [
                    images[row % 3].name,
                    f"{row % 100 / 20:.2f}",
                    f"item-{row:05d}",
                    "Rate the quality of this image.",
                ]
            )
    assert count_rows(path) == 10_000
    tracemalloc.start()
    try:
        count = 0
        for entry in read_manifest(path, check_images=False):
            assert isinstance(entry, ManifestItem)
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 10_000
    # Only the seen-id index grows (about 150 bytes an id); 10,000 whole rows would be several MB.
    assert peak < 3 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"


@pytest.mark.data
def test_the_livec_dev_set_parses_with_its_mos(livec_dir: Path, tmp_path: Path) -> None:
    with (livec_dir / "mos.csv").open(newline="", encoding="utf-8") as handle:
        expected = {row["image"]: float(row["mos"]) for row in csv.DictReader(handle)}
    manifest = write_csv(
        tmp_path / "livec.csv",
        ["image", "mos", "mos_std"],
        [[os.fspath(livec_dir / "images" / name), str(mos), "1"] for name, mos in expected.items()],
    )
    entries = list(read_manifest(manifest, root=livec_dir))
    assert errors(entries) == {}
    assert len(entries) == len(expected) == 250
    assert {e.image.name: e.mos for e in entries} == expected
    assert all(e.extra == {"mos_std": "1"} for e in entries)


def truncated_jpeg(path: Path) -> Path:
    """A JPEG cut in half: Pillow's verify() passes it, a full decode does not."""
    import io

    from tests.conftest import natural_image

    buffer = io.BytesIO()
    Image.fromarray(natural_image()).save(buffer, format="JPEG", quality=90)
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    return path


def test_images_no_tool_can_read_are_bad_rows_with_the_reason(tmp_path: Path) -> None:
    cut = truncated_jpeg(tmp_path / "cut.jpg")
    with Image.open(cut) as opened:
        opened.verify()  # the old check's verdict: fine
    make_image(tmp_path / "dot.png", size=(1, 1))
    make_image(tmp_path / "thin.png", size=(400, MIN_IMAGE_SIDE - 1))
    make_image(tmp_path / "ok.png")
    make_image(tmp_path / "big-ref.png", size=(64, 64))
    manifest = write_csv(
        tmp_path / "m.csv",
        ["image", "reference"],
        [
            ["cut.jpg", ""],
            ["dot.png", ""],
            ["thin.png", ""],
            ["ok.png", "dot.png"],
            ["ok.png", "big-ref.png"],
            ["ok.png", "ok.png"],
        ],
    )
    entries = list(read_manifest(manifest))
    found = errors(entries)
    assert found[2].startswith(
        "image 'cut.jpg' on line 2 is not a readable image: corrupt or truncated image data"
    )
    assert found[3] == (
        "image 'dot.png' on line 3 is 1x1 pixels; the IQA tools need at least "
        f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}"
    )
    assert found[4].startswith(f"image 'thin.png' on line 4 is 400x{MIN_IMAGE_SIDE - 1} pixels")
    assert found[5].startswith("reference 'dot.png' on line 5 is 1x1 pixels")
    assert found[6] == (
        f"reference 'big-ref.png' on line 6 is 64x64 but the image is "
        f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE + 8}; full-reference tools need the "
        "same size"
    )
    assert [e.line for e in entries if isinstance(e, ManifestItem)] == [7]


def test_a_bad_row_does_not_claim_its_id(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    make_image(tmp_path / "b.png")
    manifest = write_csv(
        tmp_path / "m.csv",
        ["image", "mos", "id"],
        [
            ["a.png", "high", "x"],  # 2: bad MOS, gives id x
            ["gone.png", "", ""],  # 3: bad, its derived id is gone.png
            ["b.png", "3", "x"],  # 4: good, x is free
            ["a.png", "", "gone.png"],  # 5: good, gone.png is free
            ["b.png", "", "x"],  # 6: a real duplicate of line 4
        ],
    )
    entries = list(read_manifest(manifest))
    good = [(e.line, e.item_id) for e in entries if isinstance(e, ManifestItem)]
    assert good == [(4, "x"), (5, "gone.png")]
    assert errors(entries)[6] == "duplicate id 'x' on line 6: first used on line 4"
    assert errors(entries)[2] == "mos 'high' on line 2 is not a number"


def test_an_escaping_path_is_an_escape_not_a_duplicate(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_image(tmp_path / "outside.png")
    make_image(root / "in.png")
    manifest = write_csv(
        root / "m.csv",
        ["image", "id"],
        [
            ["../outside.png", ""],  # 2
            ["../outside.png", ""],  # 3: same derived id as line 2, which was bad
            ["in.png", "a"],  # 4
            ["../outside.png", "a"],  # 5: id a is taken, but the path is the problem
        ],
    )
    found = errors(list(read_manifest(manifest, root=root)))
    assert set(found) == {2, 3, 5}
    assert all("path escapes --root" in message for message in found.values()), found


def test_an_id_in_the_bad_row_key_form_is_refused(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    manifest = write_csv(
        tmp_path / "m.csv", ["image", "id"], [["a.png", "<line 9>"], ["a.png", "line-2"]]
    )
    first, second = read_manifest(manifest)
    assert isinstance(first, ManifestError) and "reserved" in first.message
    assert bad_row_key(9) == "<line 9>"
    assert isinstance(second, ManifestItem) and second.item_id == "line-2"


def test_a_mos_outside_the_declared_range_is_a_bad_row(tmp_path: Path) -> None:
    make_image(tmp_path / "a.png")
    manifest = write_csv(
        tmp_path / "m.csv",
        ["image", "mos", "id"],
        [
            ["a.png", "0", "low"],
            ["a.png", "100", "high"],
            ["a.png", "-3", "negative"],
            ["a.png", "100.5", "above"],
        ],
    )
    entries = list(read_manifest(manifest, mos_range=(0, 100)))
    assert errors(entries) == {
        4: "mos '-3' on line 4 is outside the declared range 0 to 100 (--mos-range)",
        5: "mos '100.5' on line 5 is outside the declared range 0 to 100 (--mos-range)",
    }
    assert [e.mos for e in read_manifest(manifest)] == [0.0, 100.0, -3.0, 100.5]
    for bad in ((5, 1), (1, 1), (0, math.inf)):
        with pytest.raises(ManifestFormatError, match="is not a range"):
            read_manifest(manifest, mos_range=bad)


@pytest.mark.parametrize(
    ("record", "kept"),
    [
        # Every cell read, the row at fault as a whole (its id taken): the item's fields.
        (
            {
                "image": "a.png",
                "id": "a",
                "query": "Which?",
                "options": ["blur", "noise"],
                "answer": "noise",
                "mos": 2,
            },
            ("Which?", "B", 2.0),
        ),
        ({"image": "bad.png", "query": "Q?", "answer": "a", "mos": 4}, ("Q?", "A", 4.0)),  # bytes
        # A cell is at fault: the others are read each on its own; the MOS never is.
        ({"image": "a.png", "query": "Q?", "answer": "c", "mos": "lots"}, ("Q?", "C", None)),
        ({"image": "a.png", "query": "Q?", "answer": "Z", "mos": 4}, ("Q?", None, None)),
        ({"image": "a.png", "query": "Q?", "answer": "A", "reference": 5}, ("Q?", "A", None)),
        ({"image": "a.png", "query": {"text": "Q?"}, "answer": "D"}, (None, "D", None)),
        (
            {
                "image": "gone.png",
                "query": "Which?",
                "options": ["blur", "noise"],
                "answer": "noise",
                "mos": 3,
            },
            ("Which?", "B", None),
        ),  # no such file: found before the item is built
        (
            {"image": "a.png", "id": "<line 9>", "query": "Q?", "answer": "A"},  # a reserved id
            ("Q?", "A", None),
        ),
        # Options at fault: the query as written, a letter kept, an option's text not mappable.
        (
            {"image": "a.png", "query": "Q?", "options": ["x", "x"], "answer": "B"},
            ("Q?", "B", None),
        ),
        (
            {"image": "a.png", "query": "Q?", "options": ["x", "x"], "answer": "x"},
            ("Q?", None, None),
        ),
        ({"image": "a.png", "options": ["x", "y"], "answer": "A"}, (None, "A", None)),
        ({"image": None, "query": "Q?", "answer": "A"}, ("Q?", "A", None)),  # no image at all
    ],
)
def test_a_bad_row_keeps_the_question_and_truth_it_could_read(
    record: dict, kept: tuple, tmp_path: Path
) -> None:
    """So a question the job could not ask is counted in accuracy as unanswered."""
    make_image(tmp_path / "a.png")
    (tmp_path / "bad.png").write_bytes(b"not an image")
    first = {"image": "a.png", "id": "a", "query": "First?"}
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps(first) + "\n" + json.dumps(record) + "\n")
    _good, bad = read_manifest(manifest)
    assert isinstance(bad, ManifestError), bad
    query, answer, mos = kept
    assert (bad.answer, bad.mos) == (answer, mos), bad.message
    assert (bad.query if query is None else bad.query.split("\n")[0]) == query, bad.message


def _write_manifest(path: Path, rows: list[dict[str, object]]) -> Path:
    """Write ``rows`` in the format ``path``'s extension names (csv, jsonl or json)."""
    if path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["image", "query", "options"])
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "options": " | ".join(row.get("options", []))})
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    else:
        path.write_text(json.dumps(rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json"])
def test_a_query_or_option_past_its_limit_is_a_bad_row_with_its_line(
    tmp_path: Path, suffix: str
) -> None:
    """A query of at most MAX_QUERY_CHARS and options of at most MAX_OPTION_CHARS are read;
    one character more is a bad row naming its line and the limit, in every format, and a
    query of megabytes is refused without being read as a question (by the CSV field and
    JSONL line limits before the query's own)."""
    from agentic_iqa.query import MAX_OPTION_CHARS, MAX_QUERY_CHARS

    make_image(tmp_path / "a.png")
    longest = "Is it blurry? " + "x" * (MAX_QUERY_CHARS - 14)
    rows: list[dict[str, object]] = [
        {"image": "a.png", "query": longest, "options": ["yes", "no"]},
        {"image": "a.png", "query": longest + "x", "options": ["yes", "no"]},
        {"image": "a.png", "query": "Which?", "options": ["y" * MAX_OPTION_CHARS, "no"]},
        {"image": "a.png", "query": "Which?", "options": ["yes", "n" * (MAX_OPTION_CHARS + 1)]},
        {"image": "a.png", "query": "Rate it. " * 1_000_000, "options": ["a", "b"]},
    ]
    path = _write_manifest(tmp_path / f"m{suffix}", rows)
    entries = list(read_manifest(path, check_images=False))
    first_line = 2 if suffix == ".csv" else 1
    items = [entry for entry in entries if isinstance(entry, ManifestItem)]
    assert [item.line - first_line for item in items] == [0, 2]
    assert len(items[0].query or "") > MAX_QUERY_CHARS  # the options written in after it
    found = {line - first_line: message for line, message in errors(entries).items()}
    huge = {
        ".csv": "field larger than field limit",
        ".jsonl": "is longer than 1048576 bytes",
        ".json": f"is {len(('Rate it. ' * 1_000_000).strip()):,} characters long: at most "
        f"{MAX_QUERY_CHARS:,}",
    }[suffix]
    assert huge in found.pop(4)
    assert found == {
        1: f"query on line {first_line + 1} is {MAX_QUERY_CHARS + 1:,} characters long: "
        f"at most {MAX_QUERY_CHARS:,}",
        3: f"option B on line {first_line + 3} is {MAX_OPTION_CHARS + 1:,} characters long: "
        f"at most {MAX_OPTION_CHARS:,}",
    }
