"""The demo's closing check: a real uvicorn server on loopback, the page and one search over HTTP."""
from __future__ import annotations


def test_smoke_check_serves_page_and_search(served):
    from tokenspace.serve.smoke import check

    service, model, records, index_dir = served
    out = check(model, index_dir, "a red square", k=3)
    assert out["url"].startswith("http://127.0.0.1:")
    assert out["hits"], "the tiny query must match something for this check to mean anything"
    assert out["page_bytes"] > 500  # the search page's HTML, not an error body
    # the same search through the library: the server must return exactly these ids and scores
    expect = service.index.search(model.encode_text(["a red square"]), k=3)[0]
    assert [h[0] for h in out["hits"]] == [h.id for h in expect]
    assert [round(h[1], 5) for h in out["hits"]] == [round(h.score, 5) for h in expect]
