"""Every number in the README's "How good is it" table is read from a results JSON: each is written as
``VALUE<!-- path/to/file.json#key/key/... -->`` (the comment is invisible on the rendered page), and here
the value must equal the file's, rounded as shown (a ``%`` value is the file's fraction x 100; a date the
start of the file's date string). A new results file (a new release model) changes its numbers: this
test then names each README value to update. No number in the table's result column goes unsourced."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SOURCED = re.compile(r"(?P<value>\d[\d,]*(?:\.\d+)?(?:-\d\d-\d\d)?)(?P<unit>%?)<!--\s*(?P<file>[^#\s]+)#(?P<key>.+?)\s*-->")


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## How good is it", 1)[1].split("\n## ", 1)[0]


def _rows() -> list[list[str]]:
    rows = [ln for ln in _section().splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in rows[2:]]  # past the header and rule


def _lookup(data, key: str):
    for part in key.split("/"):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def _matches(shown: str, unit: str, value) -> bool:
    if isinstance(value, str):
        return value.startswith(shown)
    number = float(value) * (100 if unit == "%" else 1)
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return f"{number:,.{decimals}f}" == shown or f"{number:.{decimals}f}" == shown


def _sourced() -> list[re.Match]:
    return list(SOURCED.finditer(_section()))


def test_the_table_has_sourced_numbers():
    assert len(_rows()) >= 3 and len(_sourced()) >= 8


@pytest.mark.parametrize("m", _sourced(), ids=lambda m: f"{m['value']}{m['unit']}")
def test_each_readme_number_equals_its_json(m):
    path = ROOT / m["file"]
    assert path.is_file(), f"README names {m['file']}, which does not exist"
    data = json.loads(path.read_text(encoding="utf-8"))
    try:
        value = _lookup(data, m["key"])
    except (KeyError, IndexError, ValueError):
        pytest.fail(f"README: {m['file']} has no {m['key']!r} (the README's source comment names a key it lost)")
    assert _matches(m["value"], m["unit"], value), \
        f"README shows {m['value']}{m['unit']} but {m['file']}#{m['key']} is {value!r}: update the README"


def test_no_number_in_the_results_goes_unsourced():
    for row in _rows():
        result, when = row[1], row[2]
        for cell in (result, when):
            bare = re.sub(r"<!--.*?-->", "", SOURCED.sub("", cell))
            assert not re.search(r"\d", bare), f"a number without its results file in the README: {cell!r}"
        assert SOURCED.search(when) and re.fullmatch(r"\d{4}-\d\d-\d\d", SOURCED.search(when)["value"]), row
