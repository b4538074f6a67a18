import json
from pathlib import Path

from PIL import Image

from tokenspace.data.coco import read_coco_captions, read_karpathy
from tokenspace.data.folders import read_image_folder


def test_coco_captions_groups_captions_per_image(tmp_path):
    data = {
        "info": {}, "licenses": [],
        "images": [{"id": 1, "file_name": "000001.jpg", "width": 640, "height": 480},
                   {"id": 2, "file_name": "000002.jpg", "width": 640, "height": 480},
                   {"id": 3, "file_name": "000003.jpg", "width": 640, "height": 480}],
        "annotations": [{"image_id": 1, "id": 10, "caption": "A dog on a sofa. "},
                        {"image_id": 2, "id": 11, "caption": "Two cats."},
                        {"image_id": 1, "id": 12, "caption": "A brown dog."},
                        {"image_id": 3, "id": 13, "caption": "   "}],
    }
    p = tmp_path / "captions_val2017.json"
    p.write_text(json.dumps(data))
    recs, skipped = read_coco_captions(p, tmp_path / "val2017", split="val")
    assert skipped == 1  # image 3 has only an empty caption
    assert [r.id for r in recs] == ["coco:1", "coco:2"]
    assert recs[0].captions == ("A dog on a sofa.", "A brown dog.") and recs[0].text == "A dog on a sofa."
    assert recs[0].image == str(tmp_path / "val2017" / "000001.jpg") and recs[0].split == "val"


def test_karpathy_splits_and_restval(tmp_path):
    data = {"dataset": "coco", "images": [
        {"filepath": "val2014", "filename": "a.jpg", "imgid": 0, "split": "test", "cocoid": 42,
         "sentid": [0, 1], "sentences": [{"tokens": ["a", "cat"], "raw": "A cat.", "imgid": 0, "sentid": 0},
                                         {"tokens": ["a", "kitten"], "raw": "A kitten.", "imgid": 0, "sentid": 1}]},
        {"filepath": "val2014", "filename": "b.jpg", "imgid": 1, "split": "restval", "cocoid": 43,
         "sentences": [{"raw": "A bus.", "tokens": ["a", "bus"]}]},
        {"filepath": "train2014", "filename": "c.jpg", "imgid": 2, "split": "train", "cocoid": 44,
         "sentences": []},
    ]}
    p = tmp_path / "dataset_coco.json"
    p.write_text(json.dumps(data))
    recs, skipped = read_karpathy(p, tmp_path)
    assert skipped == 1
    assert [(r.id, r.split) for r in recs] == [("coco:42", "test"), ("coco:43", "train")]
    assert recs[0].texts == ("A cat.", "A kitten.") and recs[0].image == str(tmp_path / "val2014" / "a.jpg")
    only_test, _ = read_karpathy(p, tmp_path, splits={"test": "test"})
    assert [r.id for r in only_test] == ["coco:42"]


def test_image_folder_labels(tmp_path):
    for label, names in {"golden_retriever": ["1.png", "2.jpg"], "cat": ["x.png"]}.items():
        (tmp_path / "ds" / label).mkdir(parents=True)
        for n in names:
            Image.new("RGB", (2, 2)).save(tmp_path / "ds" / label / n)
    (tmp_path / "ds" / "cat" / "notes.txt").write_text("not an image")
    recs = read_image_folder(tmp_path / "ds", split="test", text_template="a photo of a {label}")
    assert [(r.label, Path(r.image).name) for r in recs] == [("cat", "x.png"), ("golden_retriever", "1.png"),
                                                             ("golden_retriever", "2.jpg")]
    assert recs[1].text == "a photo of a golden retriever" and recs[0].id == "ds:cat/x.png"
    assert {r.split for r in recs} == {"test"}
