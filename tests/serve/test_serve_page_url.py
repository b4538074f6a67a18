"""The search page in headless Chromium (tests/serve/e2e/page_url.mjs): its address holds the search (a
link with ?q= opens on it, a typed search is written back and survives a reload), the empty page offers
example searches that run when clicked, and no placeholder is cut off, at a desktop and a narrow width.
Skips as the other browser test does when node, chromium or playwright-core is missing."""
from __future__ import annotations

import json
import subprocess
from urllib.parse import parse_qs

import pytest

from tests.serve.test_serve_e2e import CHROMIUM, E2E, _playwright_ready, live_server  # noqa: F401 - a fixture


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 700])
def test_page_address_round_trip_and_examples(live_server, width):  # noqa: F811 - the imported fixture
    reason = _playwright_ready()
    if reason:
        pytest.skip(reason)
    r = subprocess.run(["node", str(E2E / "page_url.mjs"), "--url", live_server, "--chromium", CHROMIUM,
                        "--width", str(width)], cwd=E2E, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, f"browser run failed:\n{r.stdout}\n{r.stderr}"
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    # the empty page: a few examples and no results; a click searches it, in the address, examples gone
    assert len(seen["examples"]) >= 3 and seen["emptyResults"] == 0
    after = seen["afterExample"]
    assert after["q"] == after["exampleText"] and parse_qs(after["search"][1:])["q"] == [after["exampleText"]]
    assert not after["examplesVisible"]
    # a link opens on its search: fields filled, k and the metadata filter applied
    link = seen["fromLink"]
    assert (link["q"], link["k"], link["filter"]) == ("a red dog", "5", "caption~blue")
    assert 0 < link["cards"] <= 5 and all("blue" in c.split() for c in link["captions"]), link
    assert not link["examplesVisible"]
    # a typed search: the address has exactly what differs from the defaults (k stays the link's 5, the
    # cleared filter is gone), and a reload restores it
    assert parse_qs(seen["typed"][1:]) == {"q": ["a green cat"], "must_not": ["dog"], "k": ["5"]}
    assert seen["reloaded"] == {"q": "a green cat", "mustNot": "dog", "k": "5", "cards": seen["reloaded"]["cards"]}
    assert 0 < seen["reloaded"]["cards"] <= 5
    assert seen["cutPlaceholders"] == [], seen["cutPlaceholders"]
