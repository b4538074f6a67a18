"""MilvusIndex: the SparseIndex protocol on a Milvus collection (Milvus Lite locally, or a cluster).

Schema: ``id`` VARCHAR primary key (the external id) and ``vec`` SPARSE_FLOAT_VECTOR, indexed with
SPARSE_INVERTED_INDEX and metric IP, so a search scores exactly the dot product the embedded engine
computes (within float32 rounding). Needs the ``milvus`` extra: ``pip install 'tokenspace[milvus]'``
(pymilvus 2.5.x and milvus-lite 2.5.1, the real C++ server in a wheel; milvus-lite 3.x is a different
pure-Python engine and is not supported).

Where the collection lives is the ``uri``:

* a local file ending in ``.db`` runs Milvus Lite in-process (the default: a fresh file in a temp
  directory when ``uri`` is None);
* ``http://host:19530`` (plus ``token="user:password"`` or an API key, or the ``MILVUS_TOKEN``
  environment variable) points at a Milvus standalone server or a distributed cluster, for
  collections beyond one machine::

      index = MilvusIndex.build(batch, ids, uri="http://milvus.internal:19530", collection="images")
      index.save("images.milvus.json")          # flush; remembers uri + collection, never the token
      index = MilvusIndex.load("images.milvus.json")   # token from MILVUS_TOKEN or load(token=...)

``save(path)`` writes a small JSON file (uri, collection, dim, vocabulary name): the vectors stay in
Milvus. Milvus' accuracy knobs are passed through: ``drop_ratio_build`` (fraction of each document's
smallest weights dropped at index time) and ``drop_ratio_search`` (same for queries); both default
to 0, which is exact.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tokenspace.index.base import Hit
from tokenspace.sparse import INDEX_DTYPE, PTR_DTYPE, VALUE_DTYPE, SparseBatch

FORMAT = "tokenspace-milvus"
VERSION = 1
ID_FIELD = "id"
VEC_FIELD = "vec"
INSERT_ROWS = 2000  # rows per insert call: far below gRPC's 64 MB message limit at ~160 nnz per row
SEARCH_ROWS = 256  # queries per search call (Milvus caps nq at 16,384)


def _pymilvus():
    try:
        import pymilvus
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("MilvusIndex needs pymilvus and milvus-lite: pip install 'tokenspace[milvus]'") from e
    return pymilvus


def _literal(s: str) -> str:
    """A Milvus expression string literal (double quotes; backslash and quote escaped)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _in_expr(ids: Sequence[str]) -> str:
    # pymilvus's own get(ids=)/delete(ids=) paste ids into an expression unescaped, so a quote in an
    # id breaks them: every id lookup goes through this escaped expression instead
    return f"{ID_FIELD} in [" + ", ".join(_literal(str(i)) for i in ids) + "]"


def _row_dicts(batch: SparseBatch) -> list[dict[int, float]]:
    return [dict(zip(idx.tolist(), val.tolist())) for idx, val in (batch.row(i) for i in range(len(batch)))]


class MilvusIndex:
    """A handle on one Milvus collection; build()/load() make one, the methods talk to the server."""

    def __init__(self, client, uri: str, collection: str, dim: int, vocab=None):
        self._client = client
        self.uri = uri
        self.collection = collection
        self.dim = int(dim)
        self.vocab = vocab

    # ----------------------------------------------------------------- construction
    @staticmethod
    def _connect(uri: str, token: str | None):
        pymilvus = _pymilvus()
        token = token if token is not None else os.environ.get("MILVUS_TOKEN", "")
        return pymilvus.MilvusClient(uri=uri, token=token)

    @classmethod
    def build(
        cls,
        batch: SparseBatch,
        ids: Sequence[str],
        uri: str | None = None,
        collection: str = "tokenspace",
        token: str | None = None,
        overwrite: bool = False,
        drop_ratio_build: float = 0.0,
        max_id_length: int = 512,
    ) -> MilvusIndex:
        """Create the collection and insert ``batch``.

        ``uri=None`` makes a Milvus Lite file in a new temp directory. An existing collection of the
        same name is an error unless ``overwrite=True`` (which drops it first).
        """
        pymilvus = _pymilvus()
        if uri is None:
            uri = os.path.join(tempfile.mkdtemp(prefix="tokenspace-milvus-"), "milvus.db")
        elif uri.endswith(".db"):
            uri = os.path.abspath(uri)  # Milvus Lite: make save()'s JSON independent of the cwd
        if not 0.0 <= drop_ratio_build < 1.0:
            raise ValueError("drop_ratio_build must be in [0, 1)")
        client = cls._connect(uri, token)
        if client.has_collection(collection):
            if not overwrite:
                raise ValueError(f"collection {collection!r} already exists at {uri} (pass overwrite=True)")
            client.drop_collection(collection)
        schema = pymilvus.MilvusClient.create_schema(
            auto_id=False, enable_dynamic_field=False,
            # the dimension and vocabulary are ours, not Milvus's: keep them with the collection
            description=json.dumps({"format": FORMAT, "dim": batch.dim,
                                    "vocab": batch.vocab.name if batch.vocab is not None else None}),
        )
        schema.add_field(ID_FIELD, pymilvus.DataType.VARCHAR, is_primary=True, max_length=max_id_length)
        schema.add_field(VEC_FIELD, pymilvus.DataType.SPARSE_FLOAT_VECTOR)
        params = client.prepare_index_params()
        params.add_index(field_name=VEC_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="IP",
                         params={"drop_ratio_build": float(drop_ratio_build)})
        # Strong consistency: a search right after add/delete sees them, as with the embedded engine
        client.create_collection(collection, schema=schema, index_params=params, consistency_level="Strong")
        index = cls(client, uri, collection, batch.dim, batch.vocab)
        index._insert(batch, ids, check_existing=False)  # a fresh collection holds no ids yet
        return index

    @classmethod
    def load(cls, path: str | os.PathLike, token: str | None = None, vocab=None) -> MilvusIndex:
        """Reconnect to the collection a save() file names (token: argument, else ``MILVUS_TOKEN``)."""
        try:
            meta = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a MilvusIndex file ({e})") from e
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ValueError(f"{path}: unsupported format {meta.get('format')!r} v{meta.get('version')}")
        client = cls._connect(meta["uri"], token)
        if not client.has_collection(meta["collection"]):
            raise ValueError(f"{path}: collection {meta['collection']!r} not found at {meta['uri']}")
        if vocab is not None and len(vocab) != meta["dim"]:
            raise ValueError(f"vocabulary has {len(vocab)} entries, the index dim is {meta['dim']}")
        client.load_collection(meta["collection"])
        return cls(client, meta["uri"], meta["collection"], meta["dim"], vocab)

    # ----------------------------------------------------------------- protocol
    def add(self, batch: SparseBatch, ids: Sequence[str], check_existing: bool = True) -> None:
        """Insert new documents; ids already present are an error (Milvus would keep both rows).

        ``check_existing=False`` skips that lookup (one query per 2,000 rows) for bulk loads whose ids
        are known to be new; a duplicate then becomes a second row under the same id.
        """
        if batch.dim != self.dim:
            raise ValueError(f"batch dim {batch.dim} != index dim {self.dim}")
        self._insert(batch, ids, check_existing)

    def _insert(self, batch: SparseBatch, ids: Sequence[str], check_existing: bool) -> None:
        ids = [str(i) for i in ids]
        if len(ids) != len(batch):
            raise ValueError(f"got {len(ids)} ids for a batch of {len(batch)} rows")
        if len(set(ids)) != len(ids):
            raise ValueError("ids must be unique")
        for s in range(0, len(ids), INSERT_ROWS):
            chunk = ids[s:s + INSERT_ROWS]
            clash = self._existing(chunk) if check_existing else set()
            if clash:
                raise ValueError(f"ids already in the index: {sorted(clash)[:5]}")
            rows = _row_dicts(batch[s:s + INSERT_ROWS])
            self._client.insert(self.collection, [{ID_FIELD: i, VEC_FIELD: v} for i, v in zip(chunk, rows)])

    def _existing(self, ids: Sequence[str]) -> set[str]:
        if not ids or len(self) == 0:
            return set()
        found = self._client.query(self.collection, filter=_in_expr(ids), output_fields=[ID_FIELD])
        return {r[ID_FIELD] for r in found}

    def delete(self, ids: Sequence[str]) -> int:
        """Delete by id; unknown ids are ignored. Returns how many documents were removed."""
        ids = list(dict.fromkeys(str(i) for i in ids))
        present = set()
        for s in range(0, len(ids), INSERT_ROWS):
            present |= self._existing(ids[s:s + INSERT_ROWS])
        gone = sorted(present)
        for s in range(0, len(gone), INSERT_ROWS):
            self._client.delete(self.collection, filter=_in_expr(gone[s:s + INSERT_ROWS]))
        return len(gone)

    def search(
        self,
        queries: SparseBatch,
        k: int = 10,
        drop_ratio_search: float = 0.0,
        restrict_ids: Sequence[str] | None = None,
        filter: str | None = None,
    ) -> list[list[Hit]]:
        """Top-k by dot product per query, best first; only documents sharing a token are returned.

        ``restrict_ids`` limits the search to those ids; ``filter`` is a raw Milvus boolean expression
        over the ``id`` field (both may be given; they are ANDed).
        """
        if k <= 0:
            raise ValueError("k must be positive")
        if queries.dim != self.dim:
            raise ValueError(f"query dim {queries.dim} != index dim {self.dim}")
        if not 0.0 <= drop_ratio_search < 1.0:
            raise ValueError("drop_ratio_search must be in [0, 1)")
        expr = []
        if restrict_ids is not None:
            if len(restrict_ids) == 0:
                return [[] for _ in range(len(queries))]
            expr.append(_in_expr(restrict_ids))
        if filter:
            expr.append(f"({filter})")
        params = {"metric_type": "IP", "params": {"drop_ratio_search": float(drop_ratio_search)}}
        out: list[list[Hit]] = []
        rows = _row_dicts(queries)
        for s in range(0, len(rows), SEARCH_ROWS):
            chunk = rows[s:s + SEARCH_ROWS]
            todo = [j for j, r in enumerate(chunk) if r]  # an empty query matches nothing
            res = [[] for _ in chunk]
            if todo:
                found = self._client.search(
                    self.collection, data=[chunk[j] for j in todo], limit=k, anns_field=VEC_FIELD,
                    search_params=params, filter=" and ".join(expr), output_fields=[],
                )
                for j, hits in zip(todo, found):
                    res[j] = [Hit(float(h["distance"]), str(h["id"])) for h in hits]
            out.extend(res)
        return out

    def get(self, ids: Sequence[str]) -> SparseBatch:
        """The stored vectors, in the order asked; unknown ids raise KeyError."""
        ids = [str(i) for i in ids]
        found: dict[str, dict] = {}
        for s in range(0, len(ids), INSERT_ROWS):
            chunk = ids[s:s + INSERT_ROWS]
            for r in self._client.query(self.collection, filter=_in_expr(chunk), output_fields=[ID_FIELD, VEC_FIELD]):
                found[r[ID_FIELD]] = r[VEC_FIELD]
        missing = [i for i in ids if i not in found]
        if missing:
            raise KeyError(f"unknown ids: {missing[:5]}")
        indptr = np.zeros(len(ids) + 1, PTR_DTYPE)
        cols, vals = [], []
        for r, i in enumerate(ids):
            vec = found[i]
            keys = sorted(int(d) for d in vec)
            cols.extend(keys)
            vals.extend(float(vec[d]) for d in keys)
            indptr[r + 1] = len(cols)
        return SparseBatch(indptr, np.array(cols, INDEX_DTYPE), np.array(vals, VALUE_DTYPE), self.dim, self.vocab)

    def save(self, path: str | os.PathLike) -> None:
        """Flush the collection and write ``path`` (JSON: uri, collection, dim, vocabulary name)."""
        self._client.flush(self.collection)
        meta = {"format": FORMAT, "version": VERSION, "uri": self.uri, "collection": self.collection,
                "dim": self.dim, "vocab": self.vocab.name if self.vocab is not None else None}
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def stats(self) -> dict:
        return {"engine": "milvus", "uri": self.uri, "collection": self.collection, "docs": len(self),
                "dim": self.dim, "index_type": "SPARSE_INVERTED_INDEX", "metric": "IP"}

    def __len__(self) -> int:
        # count(*) honours deletes; get_collection_stats' row_count does not until compaction
        res = self._client.query(self.collection, filter="", output_fields=["count(*)"])
        return int(res[0]["count(*)"])

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> MilvusIndex:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self

    def __exit__(self, *exc) -> None:
        self.close()
