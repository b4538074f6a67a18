"""End to end in headless Chromium: the app on a free loopback port, the page driven by playwright-core
(tests/serve/e2e/search.mjs): type a query, see result cards with token chips, click for the heatmap,
save a screenshot (into the test's temp folder, or $TOKENSPACE_SCREENSHOT; tests never write into docs/:
the README's is taken by the same driver on the demo index, `make screenshot`), filter on metadata, and
see the model's note on a query of function words alone.

Needs Debian's chromium (apt-get install -y chromium) and Node.js; playwright-core is installed into
tests/serve/e2e/node_modules from its package-lock on first use. Skips, saying which, when one is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

E2E = Path(__file__).parent / "e2e"
CHROMIUM = os.environ.get("TOKENSPACE_CHROMIUM", "/usr/bin/chromium")


def _playwright_ready() -> str | None:
    """None when node, chromium and playwright-core are all there; else why not."""
    if shutil.which("node") is None:
        return "node is not installed (needs Node.js for playwright-core)"
    if not Path(CHROMIUM).exists():
        return f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)"
    if not (E2E / "node_modules" / "playwright-core").exists():
        npm = shutil.which("npm")
        if npm is None:
            return "npm is not installed (needed once to install playwright-core)"
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=E2E, capture_output=True, text=True, timeout=300,
                           check=False)
        if r.returncode != 0:
            return f"npm ci in {E2E} failed: {r.stderr.strip()[-300:]}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def live_server(served, tmp_path):
    """The app under uvicorn in a thread, on 127.0.0.1:<free port>, over the tiny collection indexed with
    each row's caption as metadata (the page's filter box filters on it)."""
    import uvicorn

    from tokenspace.index import InvertedIndex
    from tokenspace.pipeline import write_collection_meta
    from tokenspace.searcher import Searcher
    from tokenspace.serve.app import build_app
    from tokenspace.serve.service import SearchService

    _, model, records, index_dir = served
    ids = [r.id for r in records]
    InvertedIndex.build(InvertedIndex.load(index_dir).get(ids), ids,
                        metadata=[{"caption": r.text} for r in records]).save(tmp_path / "with-metadata")
    write_collection_meta(tmp_path / "with-metadata", records)
    service = SearchService(Searcher.open(tmp_path / "with-metadata", model))

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            pytest.fail("the test server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.mark.slow
def test_search_page_in_chromium(live_server, tmp_path):
    reason = _playwright_ready()
    if reason:
        pytest.skip(reason)
    out = Path(os.environ.get("TOKENSPACE_SCREENSHOT", tmp_path / "screenshot-search.png"))
    out.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["node", str(E2E / "search.mjs"), "--url", live_server, "--query", "a red dog",
                        "--out", str(out), "--chromium", CHROMIUM, "--filter", "caption~blue", "--note-query", "the"],
                       cwd=E2E, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, f"browser run failed:\n{r.stdout}\n{r.stderr}"
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["cards"] == 12 and seen["chips"] >= 12 * 2 and seen["heatmaps"] == 1
    # the filter box: only the rows whose caption holds "blue" (4 of the 12), though "a red dog" ranks others first
    assert len(seen["filtered"]) == 4 and all("blue" in c.split() for c in seen["filtered"]), seen["filtered"]
    # the search's notes on the page: "the" names nothing, so no hits and the note saying why; the next
    # search (with hits, no note) hides it again
    noted = seen["noted"]
    assert noted["cards"] == 0 and noted["results"] == "No image matches.", noted
    assert len(noted["notes"]) == 1 and "no word that names anything" in noted["notes"][0], noted
    assert noted["hiddenAfter"] is True
    assert seen["stats"].startswith("12 images"), seen["stats"]
    assert out.stat().st_size > 10_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_driver_serves_an_index_itself_as_make_screenshot_does(make_model, tiny_manifest, tmp_path, monkeypatch,
                                                                   restore_cli_logging):
    """`make screenshot`'s road: search.mjs --index DIR starts `tokenspace serve` on DIR (the model the index
    records) on a free port, takes the page and stops the server."""
    import sys

    from tokenspace.cli import main

    reason = _playwright_ready()
    if reason:
        pytest.skip(reason)
    home = tmp_path / "home"
    monkeypatch.setenv("TOKENSPACE_HOME", str(home))
    make_model("stair").save_pretrained(tmp_path / "model")
    assert main(["index", "build", "--model", str(tmp_path / "model"), "--data", f"{tiny_manifest}:train",
                 "--out", str(tmp_path / "idx"), "--tower", "torch", "--workers", "0"]) == 0
    script = Path(sys.executable).with_name("tokenspace")
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable} (pip install -e . makes it)")
    out = tmp_path / "shot.png"
    r = subprocess.run(["node", str(E2E / "search.mjs"), "--index", str(tmp_path / "idx"), "--tokenspace", str(script),
                        "--query", "a red dog", "--heatmap", "no", "--out", str(out), "--chromium", CHROMIUM],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
                       env=dict(os.environ, TOKENSPACE_HOME=str(home)))
    assert r.returncode == 0, f"browser run failed:\n{r.stdout}\n{r.stderr}"
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["cards"] == 12 and seen["heatmaps"] == 0, seen
    stats = seen["stats"]  # the model the index names, as the page header shows it
    assert stats.startswith("12 images · ") and stats.endswith(" · model tiny-stair"), stats
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
