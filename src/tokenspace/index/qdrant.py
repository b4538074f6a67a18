"""Qdrant sparse vectors: an export folder for its REST API and an adapter for ``qdrant-client``.

Qdrant keeps sparse vectors as a *named* vector of a collection (``sparse_vectors: {name: {...}}``), each
point's vector as ``{"indices": [dim ids], "values": [weights]}``, and scores a sparse query by the dot
product over shared indices, as the inverted index does. Its optional ``IDF`` modifier multiplies each
query weight by ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the collection's points at query time:
BM25's idf, the index's ``search(idf=1)`` (hubness.bm25_idf). So a tokenspace index exported here
returns the same top-k in Qdrant:

* without the modifier, as ``InvertedIndex.search(q, k, prior_weight=0)`` (the plain dot product);
* with ``idf=True``, as ``InvertedIndex.search(q, k, idf=1, prior_weight=0)``.

What Qdrant cannot hold: an index's hub prior (a per-document penalty subtracted from the dot product,
index/hubness.py) has no counterpart in a sparse query, so searches there are the prior-free ranking.

Indices are the dimension ids (the rows of the index's ``vocab.txt``, the model's WordPiece ids): a query
is the model's text vector in the same ids. Point ids must be unsigned integers or UUIDs in Qdrant, and
tokenspace ids are strings, so each point's id is ``point_id(doc_id)`` (a UUID5 of the id: the same id
always maps to the same point, so uploading again updates in place) and its payload keeps the original
``{"id": doc_id}`` beside the row's metadata.

``write_qdrant`` writes a folder for the REST API (no client needed):

    collection.json      PUT  /collections/<name>                       (the sparse vector config)
    points-00000.json    PUT  /collections/<name>/points?wait=true       ({"points": [...]}, in batches)
    queries.json         POST /collections/<name>/points/query/batch     (``write_queries``; answers in order)

``upload`` / ``search`` do the same through a ``qdrant_client.QdrantClient`` (a server, or the embedded
local mode ``QdrantClient(":memory:")`` / ``QdrantClient(path=...)``); qdrant-client is the optional
extra ``tokenspace[qdrant]``, imported only there. No torch here: the index side stays torch-free.
"""
from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from tokenspace import atomic
from tokenspace.index.base import Hits
from tokenspace.index.export import check_ids
from tokenspace.sparse import SparseBatch

VECTOR_NAME = "tokens"
COLLECTION = "tokenspace"
COLLECTION_FILE = "collection.json"
QUERIES_FILE = "queries.json"
DEFAULT_POINTS_PER_FILE = 1000  # a REST upsert body of ~1000 points of ~100 terms is a few MB
# the namespace of point ids: uuid5(NAMESPACE, doc_id). Fixed forever: re-exports must map ids alike
NAMESPACE = uuid.UUID("7d1c0c52-3f0e-5d53-9a3c-6b1f0e4a2c11")


def point_id(doc_id: str) -> str:
    """The Qdrant point id of a tokenspace document id (a UUID5 string; the payload keeps ``id``)."""
    return str(uuid.uuid5(NAMESPACE, str(doc_id)))


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise ValueError(f"{what} must be a non-empty name without slashes or outer spaces, got {name!r}")
    return name


def collection_config(vector_name: str = VECTOR_NAME, idf: bool = False) -> dict:
    """The body of ``PUT /collections/<name>``: one named sparse vector, with Qdrant's IDF modifier or
    none. Dense vectors: none (Qdrant allows a collection of sparse vectors only)."""
    _check_name(vector_name, "vector_name")
    params = {"modifier": "idf"} if idf else {}
    return {"sparse_vectors": {vector_name: params}}


def _check_batch(batch: SparseBatch, what: str) -> None:
    if not isinstance(batch, SparseBatch):
        raise TypeError(f"{what} must be a SparseBatch, got {type(batch).__name__}")
    if batch.nnz and not np.all(np.isfinite(batch.values)):
        raise ValueError(f"cannot export non-finite {what} weights")
    if batch.nnz and batch.values.min() < 0:
        raise ValueError(f"cannot export negative {what} weights")


def _sparse(batch: SparseBatch, i: int) -> tuple[list[int], list[float]]:
    """Row i as Qdrant's (indices, values), zero weights dropped (a zero adds nothing to a dot product,
    and it would count in Qdrant's document frequencies)."""
    idx, val = batch.row(i)
    keep = val > 0
    # float32 weights as their shortest text (0.3, not 0.30000001192092896), as export.py writes them
    return idx[keep].tolist(), [float(t) for t in val[keep].astype(np.float32).astype(str)]


def points(batch: SparseBatch, ids: Sequence[str], metadata: Sequence[dict] | None = None,
           vector_name: str = VECTOR_NAME) -> Iterator[dict]:
    """One REST point per row: ``{"id": point_id(doc_id), "vector": {vector_name: {"indices", "values"}},
    "payload": {"id": doc_id, **metadata}}``."""
    _check_batch(batch, "document")
    _check_name(vector_name, "vector_name")
    ids = check_ids(batch, ids)
    if metadata is not None and len(metadata) != len(ids):
        raise ValueError(f"got {len(metadata)} metadata rows for {len(ids)} documents")
    for i, doc_id in enumerate(ids):
        indices, values = _sparse(batch, i)
        extra = dict(metadata[i]) if metadata is not None else {}
        if "id" in extra and str(extra["id"]) != doc_id:
            raise ValueError(f"metadata of {doc_id!r} has its own 'id' field ({extra['id']!r}): the payload's "
                             "id is the document id")
        yield {"id": point_id(doc_id), "vector": {vector_name: {"indices": indices, "values": values}},
               "payload": {**extra, "id": doc_id}}


def query_bodies(queries: SparseBatch, k: int = 10, vector_name: str = VECTOR_NAME) -> list[dict]:
    """One Query API body per row (``POST /collections/<name>/points/query``, or the ``searches`` of
    ``.../points/query/batch``): the sparse vector in ``query``, the named vector in ``using``, the top
    ``k`` with the payload's ``id``."""
    _check_batch(queries, "query")
    _check_name(vector_name, "vector_name")
    _check_k(k)
    out = []
    for i in range(len(queries)):
        indices, values = _sparse(queries, i)
        out.append({"query": {"indices": indices, "values": values}, "using": vector_name, "limit": k,
                    "with_payload": ["id"]})
    return out


def _check_k(k) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")


def write_qdrant(batch: SparseBatch, ids: Sequence[str], out_dir: str | os.PathLike,
                 metadata: Sequence[dict] | None = None, vector_name: str = VECTOR_NAME, idf: bool = False,
                 points_per_file: int = DEFAULT_POINTS_PER_FILE) -> list[Path]:
    """``collection.json`` and ``points-00000.json``, ``points-00001.json``, ... into ``out_dir`` (see the
    module doc for the requests that send them). Returns the paths written, the collection first."""
    if isinstance(points_per_file, bool) or not isinstance(points_per_file, int) or points_per_file <= 0:
        raise ValueError(f"points_per_file must be a positive int, got {points_per_file!r}")
    config = collection_config(vector_name, idf)
    rows = points(batch, ids, metadata, vector_name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / COLLECTION_FILE]
    atomic.write_text(written[0], json.dumps(config, indent=2) + "\n")
    for n in range(max(1, math.ceil(len(batch) / points_per_file))):
        chunk = [next(rows) for _ in range(min(points_per_file, len(batch) - n * points_per_file))]
        written.append(out / f"points-{n:05d}.json")
        atomic.write_text(written[-1], json.dumps({"points": chunk}, ensure_ascii=False) + "\n")
    return written


def write_queries(queries: SparseBatch, path: str | os.PathLike, k: int = 10,
                  vector_name: str = VECTOR_NAME) -> Path:
    """The rows of ``queries`` as one batch query body, ``{"searches": [query_bodies...]}``, for
    ``POST /collections/<name>/points/query/batch`` (answers come back in the same order)."""
    body = {"searches": query_bodies(queries, k, vector_name)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(body, ensure_ascii=False) + "\n")
    return path


# ---------------------------------------------------------------------- qdrant-client
def _models():
    try:
        # optional: qdrant (the export folder needs no client; upload and search do)
        from qdrant_client import models
    except ImportError:
        raise ImportError("qdrant-client is not installed: pip install 'tokenspace[qdrant]'") from None
    return models


def upload(client, batch: SparseBatch, ids: Sequence[str], collection: str = COLLECTION,
           metadata: Sequence[dict] | None = None, vector_name: str = VECTOR_NAME, idf: bool = False,
           batch_size: int = 256, recreate: bool = False) -> int:
    """Create ``collection`` with one sparse vector ``vector_name`` (IDF modifier when ``idf``) and upsert
    every row as a point (``points``). An existing collection is refused unless ``recreate`` (then it is
    deleted first): points of another collection would mix into the search. Returns the points written."""
    models = _models()
    _check_name(collection, "collection")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    rows = list(points(batch, ids, metadata, vector_name))  # checks everything before the collection exists
    if client.collection_exists(collection):
        if not recreate:
            raise ValueError(f"Qdrant collection {collection!r} exists: pass recreate=True to replace it")
        client.delete_collection(collection)
    modifier = models.Modifier.IDF if idf else None
    client.create_collection(collection, vectors_config={},
                             sparse_vectors_config={vector_name: models.SparseVectorParams(modifier=modifier)})
    for s in range(0, len(rows), batch_size):
        client.upsert(collection, points=[
            models.PointStruct(id=p["id"], payload=p["payload"],
                               vector={vector_name: models.SparseVector(**p["vector"][vector_name])})
            for p in rows[s:s + batch_size]], wait=True)
    return len(rows)


def upload_folder(client, folder: str | os.PathLike, collection: str = COLLECTION,
                  recreate: bool = False) -> int:
    """Send a ``write_qdrant`` folder through a client (what the module doc's REST requests do): the
    collection as ``collection.json`` configures it, then every ``points-*.json`` batch. Returns the
    points written."""
    models = _models()
    folder = Path(folder)
    try:
        config = json.loads((folder / COLLECTION_FILE).read_text(encoding="utf-8"))
        (name, params), = config["sparse_vectors"].items()
    except (OSError, ValueError, KeyError, AttributeError) as e:
        raise ValueError(f"{folder}: not a Qdrant export folder ({COLLECTION_FILE}: {e})") from None
    if client.collection_exists(_check_name(collection, "collection")):
        if not recreate:
            raise ValueError(f"Qdrant collection {collection!r} exists: pass recreate=True to replace it")
        client.delete_collection(collection)
    modifier = models.Modifier.IDF if params.get("modifier") == "idf" else None
    client.create_collection(collection, vectors_config={},
                             sparse_vectors_config={name: models.SparseVectorParams(modifier=modifier)})
    n = 0
    for f in sorted(folder.glob("points-*.json")):
        batch = json.loads(f.read_text(encoding="utf-8"))["points"]
        client.upsert(collection, points=[
            models.PointStruct(id=p["id"], payload=p["payload"],
                               vector={name: models.SparseVector(**p["vector"][name])}) for p in batch], wait=True)
        n += len(batch)
    return n


def search(client, queries: SparseBatch, k: int = 10, collection: str = COLLECTION,
           vector_name: str = VECTOR_NAME) -> list[Hits]:
    """Top-``k`` hits (Hits of (score, id), as InvertedIndex.search returns) per query row from a collection ``upload`` wrote, best first. A row
    without a term matches nothing (as in tokenspace): no hits, without asking Qdrant."""
    models = _models()
    out = []
    for body in query_bodies(queries, k, vector_name):
        if not body["query"]["indices"]:
            out.append(Hits())
            continue
        res = client.query_points(collection, query=models.SparseVector(**body["query"]), using=vector_name,
                                  limit=k, with_payload=["id"])
        out.append(Hits.of((float(p.score), p.payload["id"]) for p in res.points if p.score > 0))
    return out


__all__ = [
    "COLLECTION",
    "VECTOR_NAME",
    "collection_config",
    "point_id",
    "points",
    "query_bodies",
    "search",
    "upload",
    "upload_folder",
    "write_qdrant",
    "write_queries",
]
