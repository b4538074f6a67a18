"""POST /search's body, read and checked by serve/app.py's SearchRoute: the same request object or the
same validation errors, error for error, as FastAPI's own handling of a body parameter gives."""
from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.testclient import TestClient

from tokenspace.serve import schemas
from tokenspace.serve.app import SearchRoute

BODIES = [
    '{"text": "a red heart", "k": 3}',
    b'{"text": "\xa2"}',  # not UTF-8: no text at all (a 400)
    '{"text": "a red heart"}'.encode("utf-16"),
    '{"text": "a", "k": 36.0, "must": ["red"], "must_not": [], "where": "red OR blue", "steer": {"red": 2}}',
    '{"text": "a", "filter": {"source": {"in": ["x", 1, true]}, "caption": {"word": "dog"}}, "idf": 1}',
    "",
    "{",
    '{"text": "a",}',
    "[]",
    '"a red heart"',
    "null",
    '{"text": 1}',
    '{"text": "a", "k": "10"}',
    '{"text": "a", "k": true}',
    '{"text": "a", "k": 10.5}',
    '{"text": "   "}',
    '{"text": "\\u001d"}',
    '{"text": "a", "extra": 1}',
    '{"text": "a", "filter": {"n": NaN}}',
    '{"text": "a", "weight": Infinity}',
    '{"text": "a", "filter": {">": 1}}',
    '{"text": "\\ud800"}',
    '{"k": 3}',
    '{"text": "a", "fusion": "dense"}',
    '{"text": "a", "steer": {"red": 1000}}',
]
TYPES = [None, "application/json", "application/json; charset=utf-8", "Application/JSON", " application/json ;",
         "application/vnd.api+json", "application/jsonx", "text/plain", "application", "json", "text/json",
         "multipart/form-data; boundary=xx", "application/x-www-form-urlencoded"]


def _app(route_class=None) -> TestClient:
    app = FastAPI()

    @app.exception_handler(RequestValidationError)
    async def _errors(request, exc):  # every field of every error, "input" included
        return PlainTextResponse(repr(exc.errors()), status_code=422)

    def search(req: schemas.SearchRequest):  # a Response, as /search's endpoint returns
        return JSONResponse(req.model_dump(by_alias=True))

    extra = {} if route_class is None else {"route_class_override": route_class}
    app.router.add_api_route("/search", search, methods=["POST"], **extra)
    return TestClient(app)


@pytest.fixture(scope="module")
def clients():
    with _app() as fastapis, _app(SearchRoute) as ours:
        yield fastapis, ours


@pytest.mark.parametrize("content_type", TYPES)
def test_the_same_answer_as_fastapis_own_body_handling(clients, content_type):
    fastapis, ours = clients
    headers = {} if content_type is None else {"content-type": content_type}
    for body in BODIES:
        body = body if isinstance(body, bytes) else body.encode()
        want = fastapis.post("/search", content=body, headers=headers)
        got = ours.post("/search", content=body, headers=headers)
        assert (got.status_code, got.text) == (want.status_code, want.text), (body, content_type)


def test_the_cases_cover_acceptance_and_each_kind_of_refusal(clients):
    fastapis, _ = clients
    kinds = {fastapis.post("/search", content=b, headers={"content-type": "application/json"}).status_code
             for b in BODIES}
    assert kinds == {200, 400, 422}
    assert "json_invalid" in fastapis.post("/search", content="{", headers={"content-type": "application/json"}).text
    assert "missing" in fastapis.post("/search", content="", headers={"content-type": "application/json"}).text
