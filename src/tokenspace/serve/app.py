"""The HTTP API and web page (``tokenspace serve --model M --index I``): a thin layer over SearchService.

Each route parses its request, calls one SearchService method and turns the service's errors into
status codes (400 bad tokens or boolean query, 404 unknown id, 413 too large, 415 not an image; 422
for requests outside the schema's limits; 408 for a body that does not arrive in time; 503 with
Retry-After for an image upload that does not fit in the pixel budget of the uploads in flight). OpenAPI docs
are at /docs. Every GET route also answers HEAD (uptime checks, ``curl -I``).
"""
from __future__ import annotations

import json
import logging
import math
import os
import socket
from pathlib import Path
from typing import Annotated

import uvicorn
from fastapi import FastAPI, File, Query, Request, UploadFile
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from tokenspace.models.fused_queries import one_blas_thread
from tokenspace.searcher import Searcher
from tokenspace.serve import schemas
from tokenspace.serve.body_limit import BodyLimit
from tokenspace.serve.body_timeout import BODY_TIMEOUT, BodyTimeout
from tokenspace.serve.head import HeadAsGet
from tokenspace.serve.header_timeout import HEADER_TIMEOUT, with_header_timeout
from tokenspace.serve.lingering import LINGER
from tokenspace.serve.service import SearchService, ServiceError
from tokenspace.serve.uploads import (
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_PIXELS,
    UPLOAD_PIXEL_BUDGET,
    PixelBudget,
    UploadError,
    decode_within,
    open_upload,
)

STATIC = Path(__file__).parent / "static"
# collection images are served from our own origin; an SVG opened directly could run script, so
# image responses may load nothing and run nothing
IMAGE_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox",
                 "X-Content-Type-Options": "nosniff", "Cache-Control": "public, max-age=3600"}
ERRORS = {code: {"model": schemas.Error} for code in (400, 404)}
SLOW_BODY = {408: {"model": schemas.Error, "description": "the request body did not arrive in time"},
             413: {"model": schemas.Error, "description": "the request body is too large"}}
MULTIPART_SLACK = 64 * 1024  # bytes of multipart framing (boundaries, part headers) around an upload
UPLOAD_PATH = "/search/image"
# a search's response checked against its schema and written as JSON in the request's own thread: what
# FastAPI does for a response_model, less its second trip through the thread pool (the check runs there
# for a plain function) and its per-request setup; the schema in /docs stays the response_model's
SEARCH_RESPONSE = TypeAdapter(schemas.SearchResponse)
SEARCH_REQUEST = TypeAdapter(schemas.SearchRequest)


class SearchRoute(APIRoute):
    """POST /search: the operation FastAPI documents from the endpoint's signature (the same OpenAPI
    body schema and 422s), its JSON body read and checked here (``search_request``) and the endpoint
    run in the thread pool, or on the event loop when the endpoint's ``quick(request)`` says the search is
    short (``SearchService.quick_text``: an inference-free model's look-up, a small index); the endpoint returns
    its Response (written by ``_search_json``). Why: FastAPI's request handling around a body parameter
    (dependency solving, a Content-Type parsed by the email package, its body-field machinery) was ~0.7 ms
    of CPU per search on the event loop that every request shares, ~15% of a search of the release model;
    the thread pool's hand-off (a queue, a wake-up of the loop through its self-pipe, the interpreter lock
    passed back and forth) cost an inference-free model's search more than its search: 391 -> 502
    requests/s on the loop (benchmarks/serve_load.py). FastAPI's documented hook for a route's handling:
    ``get_route_handler``."""

    def get_route_handler(self):
        endpoint = self.endpoint
        quick = getattr(endpoint, "quick", None)

        async def handle(request: Request) -> Response:
            try:
                body = await request.body()
            except HTTPException:  # the body middlewares' 408 and 413
                raise
            except Exception as e:  # noqa: BLE001 - as FastAPI answers a body it cannot read
                raise HTTPException(400, "There was an error parsing the body") from e
            req = search_request(body, request.headers.get("content-type"))
            if quick is not None and quick(req):
                return endpoint(req)
            return await run_in_threadpool(endpoint, req)

        return handle


def search_request(body: bytes, content_type: str | None) -> schemas.SearchRequest:
    """A /search body as its SearchRequest, or the RequestValidationError (a 422) FastAPI gives for it,
    error for error: no body is a missing field; a body is JSON only under a JSON Content-Type
    (application/json or application/*+json), else its bytes are checked (and refused) as they are;
    bytes that are no text at all get FastAPI's 400."""
    if not body:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    value = body
    if content_type and _json_type(content_type):
        try:
            value = json.loads(body)
        except json.JSONDecodeError as e:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                                           "input": {}, "ctx": {"error": e.msg}}]) from e
        except Exception as e:  # noqa: BLE001 - bytes that are no text (not UTF-8/16/32): FastAPI's 400
            raise HTTPException(400, "There was an error parsing the body") from e
    try:
        return SEARCH_REQUEST.validate_python(value, from_attributes=True)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])}
                                      for err in e.errors(include_url=False)]) from None


def _json_type(content_type: str) -> bool:
    """Whether a Content-Type is JSON, read as the email package reads it (FastAPI's test): the part
    before any ';', stripped and lower-cased; a value without exactly one '/' is text/plain."""
    kind = content_type.partition(";")[0].strip().lower()
    if kind.count("/") != 1:
        return False
    main, sub = kind.split("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def create_app(searcher: Searcher, *, upload_pixels: int = UPLOAD_PIXEL_BUDGET) -> FastAPI:
    """The app over a search session (``Searcher.open``: an index folder written by `tokenspace index
    build`, its model, a dense half for hybrid search: the ``fusion`` field); ``upload_pixels``: the
    decoded pixels of image uploads in flight at once (build_app)."""
    return build_app(SearchService(searcher), upload_pixels=upload_pixels)


def build_app(service: SearchService, max_upload_bytes: int = MAX_UPLOAD_BYTES,
              body_timeout: float = BODY_TIMEOUT, max_json_bytes: int = schemas.MAX_JSON_BYTES,
              upload_pixels: int = UPLOAD_PIXEL_BUDGET) -> FastAPI:
    """The FastAPI app over a service; uploads larger than ``max_upload_bytes`` and other request bodies
    larger than ``max_json_bytes`` are refused (413, while they arrive), a request body that has not
    fully arrived ``body_timeout`` seconds after it started gets a 408. Image uploads in flight decode at
    most ``upload_pixels`` pixels at once (serve/uploads.py: about 9 bytes each at the peak); one that does
    not fit gets a 503 with Retry-After, one larger than the whole budget a 413."""
    budget = PixelBudget(upload_pixels)
    app = FastAPI(title="tokenspace", version="1",
                  description="Search images by text in a sparse token space; every hit explained token by token.")
    app.state.service = service
    app.state.upload_budget = budget
    app.add_middleware(BodyTimeout, seconds=body_timeout)
    upload_body = max_upload_bytes + MULTIPART_SLACK
    app.add_middleware(BodyLimit, limit_for=lambda path: upload_body if path == UPLOAD_PATH else max_json_bytes)
    app.add_middleware(HeadAsGet)

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(UploadError)
    async def _upload_error(request: Request, exc: UploadError):
        return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        # FastAPI's own handler echoes the offending input: a 1 MB text came back as a 1 MB error, and
        # JSON cannot carry NaN or a lone surrogate (rendering the 422 itself failed with a 500). The
        # field's location, message and limits (ctx) say what to fix.
        errors = [{k: v for k, v in e.items() if k != "input"} for e in exc.errors()]
        return JSONResponse({"detail": _json_safe(jsonable_encoder(errors))}, status_code=422)

    @app.get("/", include_in_schema=False)
    def page():
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/healthz", response_model=schemas.Health)
    def healthz():
        return {"status": "ok"}

    @app.get("/stats", response_model=schemas.StatsResponse)
    def stats():
        return service.stats()

    def search(req: schemas.SearchRequest):
        """Images for a text; ``must``/``must_not``/``where`` filter on tokens, ``filter`` on the rows'
        metadata, ``steer`` reweights the query."""
        return _search_json(service.search_text(req.text, req.k, req.must, req.must_not, req.where, req.steer,
                                                filter=req.meta_filter(), fusion=req.fusion, weight=req.weight,
                                                **req.ranking()))

    search.quick = lambda req: service.quick_text(req.fusion)  # run on the event loop (SearchRoute)
    app.router.add_api_route("/search", search, methods=["POST"], response_model=schemas.SearchResponse,
                             responses={**ERRORS, **SLOW_BODY}, route_class_override=SearchRoute)

    @app.post(UPLOAD_PATH, response_model=schemas.SearchResponse,
              responses={400: {"model": schemas.Error, "description": "malformed multipart body"},
                         413: {"model": schemas.Error}, 415: {"model": schemas.Error},
                         503: {"model": schemas.Error, "description": "the uploads in flight fill the server's "
                               "pixel budget: retry after the seconds its Retry-After header says"},
                         **SLOW_BODY})
    def search_image(file: Annotated[UploadFile, File(description="a PNG, JPEG, WebP or GIF image",
                                                      json_schema_extra={"minLength": 1})],
                     k: Annotated[int, Query(ge=1, le=schemas.MAX_K)] = 10):
        """Images similar to an uploaded one."""
        upload = file.file  # read from where the multipart parser put it (memory, then disk): never copied
        upload.seek(0, os.SEEK_END)
        if not upload.tell():
            # outside the schema (minLength 1), so a 422 in the shape of every other one (it was a 415
            # the schema allowed)
            raise RequestValidationError([{"type": "string_too_short", "loc": ("body", "file"),
                                           "msg": "the upload is empty (0 bytes)", "ctx": {"min_length": 1}}])
        # the header alone, checked against the caps; its pixels are held from before they are decoded
        # until the query vector is computed (uploads.py), so the uploads in flight never decode more than
        # the budget: one that does not fit gets a 503
        opened = open_upload(upload, max_bytes=max_upload_bytes, max_pixels=min(MAX_UPLOAD_PIXELS, budget.capacity))
        return _search_json(decode_within(budget, opened, lambda image: service.search_image(image, k)))

    @app.get("/explain/{id:path}", response_model=schemas.ExplainResponse, responses=ERRORS)
    def explain(id: str, top_k: Annotated[int, Query(ge=1, le=200)] = 20):
        """The top tokens of an indexed image."""
        return service.explain(id, top_k)

    @app.post("/heatmap", response_class=Response, responses={
        **ERRORS, **SLOW_BODY, 200: {"content": {"image/png": {}}, "description": "the image with the heatmap overlaid"}})
    def heatmap(req: schemas.HeatmapRequest):
        """Where the text's tokens fire on an indexed image (STAIR), as a PNG."""
        return Response(service.heatmap(req.id, req.text), media_type="image/png")

    @app.get("/image/{id:path}", response_class=FileResponse, responses={
        404: {"model": schemas.Error}, 200: {"content": {"image/*": {}}, "description": "the image file"}})
    def image(id: str):
        """The collection's image file for an indexed id (only ids, never paths, are accepted)."""
        return FileResponse(service.image_path(id), headers=IMAGE_HEADERS)

    return app


def _search_json(content: dict) -> Response:
    """A SearchResponse as JSON (see SEARCH_RESPONSE)."""
    return Response(SEARCH_RESPONSE.dump_json(SEARCH_RESPONSE.validate_python(content)), media_type="application/json")


def _json_safe(value):
    """``value`` with what strict JSON cannot encode made printable: non-finite floats as strings,
    unpaired surrogates as backslash escapes."""
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _check_port_free(host: str, port: int) -> None:
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as e:
        raise OSError(f"cannot listen on {host}:{port} ({os.strerror(e.errno) if e.errno else e}): another "
                      "server may hold it; pick another --port") from None


def server_settings(header_timeout: float = HEADER_TIMEOUT, linger: float = LINGER, parser: str | None = None) -> dict:
    """uvicorn's settings for the app (``uvicorn.run(app, host=..., port=..., **server_settings())``): its
    HTTP/1.1 protocol (``parser``: "httptools" or "h11"; default httptools where it is installed) with a
    deadline on each request's headers (serve/header_timeout.py; the body has its own,
    serve/body_timeout.py), which closes a connection whose body was refused unread after at most
    ``linger`` seconds of lingering read (serve/lingering.py)."""
    return {"http": with_header_timeout(header_timeout, linger, parser), "log_level": "warning"}


def run(searcher: Searcher, host: str = "127.0.0.1", port: int = 8000,
        upload_pixels: int = UPLOAD_PIXEL_BUDGET) -> None:
    """Serve the API and page over a search session with uvicorn (what `tokenspace serve` calls)."""
    _check_port_free(host, port)
    one_blas_thread()
    app = create_app(searcher, upload_pixels=upload_pixels)
    logging.getLogger(__name__).info("serving %d images on http://%s:%d  (API docs at /docs)",
                                     app.state.service.stats()["size"], host, port)
    uvicorn.run(app, host=host, port=port, **server_settings())
