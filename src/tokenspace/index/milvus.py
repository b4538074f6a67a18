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

``save(path)`` writes a small JSON file (uri, collection, dim, the vocabulary's tokens): the vectors
stay in Milvus. Milvus' accuracy knobs are passed through: ``drop_ratio_build`` (fraction of each
document's smallest weights dropped at index time) and ``drop_ratio_search`` (same for queries); both
default to 0, which is exact. The sparse index algorithm is chosen with ``index_type``
(SPARSE_INVERTED_INDEX or SPARSE_WAND) and ``inverted_index_algo`` (TAAT_NAIVE, DAAT_MAXSCORE,
DAAT_WAND; None = the server's default).

``search`` takes InvertedIndex's keywords (the SparseIndex protocol): ``where`` (a query.Node or a
string parsed over the vocabulary), ``must`` / ``must_not`` (dims or tokens), ``subset`` (ids) and
``threads``. Token filters run in Milvus on a ``tokens`` ARRAY field (the dims with weight > 0,
at most MAX_TOKENS per document): a leaf is ``array_contains(tokens, d)``. Milvus Lite 2.5 rejects
``not`` over an expression, so the tree is put in negation normal form and a negated leaf becomes
``id not in [documents holding d]`` (one query per negated token).

Row metadata (metadata.py: source, caption, a user's fields) goes into a ``meta`` JSON field, and the
words of its text fields into a ``words`` ARRAY of ``field:word`` strings; ``search(meta=...)`` maps a
metadata filter to Milvus scalar filters on them (``meta["source"] == "emoji"``, ``meta["source"] in
[...]``, ``array_contains(words, "caption:dog")``), applied by Milvus before top-k like the rest.
Token and metadata filters are resolved by the index layer's one resolver (filters.py, metadata.py),
so they are refused and answered as every engine refuses and answers them.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tokenspace import atomic
from tokenspace.index import filters
from tokenspace.index.base import Hits
from tokenspace.index.metadata import MetaFilter, check_rows, field_word, words
from tokenspace.index.query import And, Node, Not, Or, Term
from tokenspace.sparse import INDEX_DTYPE, PTR_DTYPE, VALUE_DTYPE, SparseBatch
from tokenspace.vocab import Vocabulary

# milvus-lite 2.5 imports pkg_resources, whose deprecation warning says nothing a tokenspace user can act on
# (printed on every Milvus command): this one message, from that one module, is not shown
warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning, module="milvus_lite")

FORMAT = "tokenspace-milvus"
VERSION = 1
ID_FIELD = "id"
VEC_FIELD = "vec"
TOK_FIELD = "tokens"
META_FIELD = "meta"
WORDS_FIELD = "words"
MAX_WORD_BYTES = 256  # longer words are not stored in WORDS_FIELD (a word filter cannot match them)
MAX_META_BYTES = 65_536  # Milvus' JSON field limit
MAX_TOKENS = 4096  # Milvus' largest ARRAY capacity
INDEX_TYPES = ("SPARSE_INVERTED_INDEX", "SPARSE_WAND")
ALGOS = ("TAAT_NAIVE", "DAAT_MAXSCORE", "DAAT_WAND")
INSERT_ROWS = 2000  # rows per insert call: far below gRPC's 64 MB message limit at ~160 nnz per row
SEARCH_ROWS = 256  # queries per search call (Milvus caps nq at 16,384)


def _pymilvus():
    try:
        import pymilvus  # optional: pymilvus (the milvus extra)
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

    def __init__(self, client, uri: str, collection: str, dim: int, vocab=None, index_params: dict | None = None,
                 has_meta: bool = True):
        self._client = client
        self.has_meta = has_meta  # collections made before metadata have no meta / words fields
        self.uri = uri
        self.collection = collection
        self.dim = int(dim)
        self.vocab = vocab
        self.index_params = index_params or {}

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
        index_type: str = "SPARSE_INVERTED_INDEX",
        inverted_index_algo: str | None = None,
        metadata: Sequence[dict] | None = None,
    ) -> MilvusIndex:
        """Create the collection and insert ``batch``.

        ``uri=None`` makes a Milvus Lite file in a new temp directory. An existing collection of the
        same name is an error unless ``overwrite=True`` (which drops it first). ``metadata``: one dict
        of fields per document (metadata.py), filtered on by ``search(meta=...)``.
        """
        pymilvus = _pymilvus()
        if uri is None:
            uri = os.path.join(tempfile.mkdtemp(prefix="tokenspace-milvus-"), "milvus.db")
        elif uri.endswith(".db"):
            uri = os.path.abspath(uri)  # Milvus Lite: make save()'s JSON independent of the cwd
        if not 0.0 <= drop_ratio_build < 1.0:
            raise ValueError("drop_ratio_build must be in [0, 1)")
        if index_type not in INDEX_TYPES:
            raise ValueError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")
        if inverted_index_algo is not None and inverted_index_algo not in ALGOS:
            raise ValueError(f"inverted_index_algo must be one of {ALGOS} or None, got {inverted_index_algo!r}")
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
        # the dims each document holds, for token filters (where / must / must_not)
        schema.add_field(TOK_FIELD, pymilvus.DataType.ARRAY, element_type=pymilvus.DataType.INT32,
                         max_capacity=MAX_TOKENS)
        # row metadata and the field:word strings of its text fields, for metadata filters
        schema.add_field(META_FIELD, pymilvus.DataType.JSON)
        schema.add_field(WORDS_FIELD, pymilvus.DataType.ARRAY, element_type=pymilvus.DataType.VARCHAR,
                         max_capacity=MAX_TOKENS, max_length=MAX_WORD_BYTES)
        index_params = {"index_type": index_type, "drop_ratio_build": float(drop_ratio_build)}
        if inverted_index_algo is not None:
            index_params["inverted_index_algo"] = inverted_index_algo
        params = client.prepare_index_params()
        params.add_index(field_name=VEC_FIELD, index_type=index_type, metric_type="IP",
                         params={k: v for k, v in index_params.items() if k != "index_type"})
        # Strong consistency: a search right after add/delete sees them, as with the embedded engine
        client.create_collection(collection, schema=schema, index_params=params, consistency_level="Strong")
        index = cls(client, uri, collection, batch.dim, batch.vocab, index_params)
        index._insert(batch, ids, check_existing=False, metadata=metadata)  # a fresh collection holds no ids yet
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
        if vocab is None and meta.get("tokens") is not None:
            vocab = Vocabulary(meta["tokens"], name=meta.get("vocab") or "custom")
        client.load_collection(meta["collection"])
        fields = {f["name"] for f in client.describe_collection(meta["collection"])["fields"]}
        return cls(client, meta["uri"], meta["collection"], meta["dim"], vocab, meta.get("index_params"),
                   has_meta=META_FIELD in fields)

    # ----------------------------------------------------------------- protocol
    def add(self, batch: SparseBatch, ids: Sequence[str], check_existing: bool = True,
            metadata: Sequence[dict] | None = None) -> None:
        """Insert new documents; ids already present are an error (Milvus would keep both rows).

        ``check_existing=False`` skips that lookup (one query per 2,000 rows) for bulk loads whose ids
        are known to be new; a duplicate then becomes a second row under the same id.
        """
        if batch.dim != self.dim:
            raise ValueError(f"batch dim {batch.dim} != index dim {self.dim}")
        self._insert(batch, ids, check_existing, metadata)

    def _insert(self, batch: SparseBatch, ids: Sequence[str], check_existing: bool,
                metadata: Sequence[dict] | None = None) -> None:
        ids = [str(i) for i in ids]
        if len(ids) != len(batch):
            raise ValueError(f"got {len(ids)} ids for a batch of {len(batch)} rows")
        rows_meta = check_rows(metadata, len(batch))
        if rows_meta is not None and not self.has_meta and any(rows_meta):
            raise ValueError(f"collection {self.collection!r} was made without metadata fields: rebuild it to add metadata")
        extra = [self._meta_fields(r) for r in rows_meta] if rows_meta is not None else None
        if len(set(ids)) != len(ids):
            raise ValueError("ids must be unique")
        for s in range(0, len(ids), INSERT_ROWS):
            chunk = ids[s:s + INSERT_ROWS]
            clash = self._existing(chunk) if check_existing else set()
            if clash:
                raise ValueError(f"ids already in the index: {sorted(clash)[:5]}")
            rows = _row_dicts(batch[s:s + INSERT_ROWS])
            too_long = [i for i, v in zip(chunk, rows) if len(v) > MAX_TOKENS]
            if too_long:
                raise ValueError(f"document {too_long[0]!r} has more than {MAX_TOKENS} tokens (Milvus' ARRAY "
                                 "capacity): prune it first (SparseBatch.prune_topk)")
            docs = [{ID_FIELD: i, VEC_FIELD: v, TOK_FIELD: sorted(v)} for i, v in zip(chunk, rows)]
            if self.has_meta:
                for j, d in enumerate(docs):
                    d.update(extra[s + j] if extra is not None else {META_FIELD: {}, WORDS_FIELD: []})
            self._client.insert(self.collection, docs)

    @staticmethod
    def _meta_fields(row: dict) -> dict:
        """The meta JSON and the field:word strings of one row's metadata."""
        if len(json.dumps(row).encode()) > MAX_META_BYTES:
            raise ValueError(f"a row's metadata is over {MAX_META_BYTES} bytes of JSON (Milvus' JSON field limit)")
        ws = sorted({field_word(k, w) for k, v in row.items() for w in words(v)})
        ws = [w for w in ws if len(w.encode()) <= MAX_WORD_BYTES]
        if len(ws) > MAX_TOKENS:
            raise ValueError(f"a row's text fields hold more than {MAX_TOKENS} distinct words (Milvus' ARRAY capacity)")
        return {META_FIELD: row, WORDS_FIELD: ws}

    def _query(self, expr: str, fields: list[str]) -> list[dict]:
        """``client.query`` that returns [] for no match: pymilvus 2.5 fails to parse an empty result of a
        collection with an ARRAY field ("Unsupported data type: 0"), so that error is checked with
        count(*) and turned into the empty answer it stands for."""
        try:
            return self._client.query(self.collection, filter=expr, output_fields=fields)
        except _pymilvus().MilvusException as e:
            if "Unsupported data type" not in str(e):
                raise
            count = self._client.query(self.collection, filter=expr, output_fields=["count(*)"])
            if int(count[0]["count(*)"]) != 0:
                raise
            return []

    def _existing(self, ids: Sequence[str]) -> set[str]:
        if not ids or len(self) == 0:
            return set()
        found = self._query(_in_expr(ids), [ID_FIELD])
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
        *,
        where: str | Node | None = None,
        must: Sequence | None = None,
        must_not: Sequence | None = None,
        subset: Sequence[str] | None = None,
        meta: dict | MetaFilter | None = None,
        threads: int = 1,
        drop_ratio_search: float = 0.0,
        filter: str | None = None,
    ) -> list[Hits]:
        """Top-k by dot product per query, best first; only documents sharing a token are returned.

        ``where`` / ``must`` / ``must_not`` / ``subset`` / ``meta`` mean what they mean for InvertedIndex
        (token filters, an id subset whose unknown ids are an error, a metadata filter). ``threads``:
        query chunks of SEARCH_ROWS are sent on this many connections at once. ``filter`` is a raw
        Milvus boolean expression over the ``id``, ``tokens``, ``meta`` and ``words`` fields, ANDed with
        the rest.
        """
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        if queries.dim != self.dim:
            raise ValueError(f"query dim {queries.dim} != index dim {self.dim}")
        if not 0.0 <= drop_ratio_search < 1.0:
            raise ValueError("drop_ratio_search must be in [0, 1)")
        expr = [self._expr(t, False) for t in filters.token_tree(self.dim, self.vocab, must, must_not, where)]
        meta = MetaFilter.resolve(meta)
        if meta is not None:
            if not self.has_meta:
                raise ValueError(f"collection {self.collection!r} was made without metadata fields: rebuild it "
                                 "to filter on metadata")
            expr.append(f"({meta.milvus(META_FIELD, WORDS_FIELD)})")
        if subset is not None:
            if isinstance(subset, str):
                raise TypeError("ids must be a sequence of strings, not one string")
            subset = list(dict.fromkeys(str(i) for i in subset))
            found = set()
            for s in range(0, len(subset), INSERT_ROWS):
                found |= self._existing(subset[s:s + INSERT_ROWS])
            missing = [i for i in subset if i not in found]
            if missing:
                raise ValueError(f"subset: {len(missing)} unknown id(s), e.g. {missing[0]!r}")
            if len(subset) == 0:
                return [[] for _ in range(len(queries))]
            expr.append(_in_expr(subset))
        if filter:
            expr.append(f"({filter})")
        params = {"metric_type": "IP", "params": {"drop_ratio_search": float(drop_ratio_search)}}
        rows = _row_dicts(queries)

        def run(chunk: list[dict]) -> list[Hits]:
            todo = [j for j, r in enumerate(chunk) if r]  # an empty query matches nothing
            res = [Hits() for _ in chunk]
            if todo:
                found = self._client.search(
                    self.collection, data=[chunk[j] for j in todo], limit=int(k), anns_field=VEC_FIELD,
                    search_params=params, filter=" and ".join(expr), output_fields=[],
                )
                for j, hits in zip(todo, found):
                    res[j] = Hits.of((float(h["distance"]), str(h["id"])) for h in hits)
            return res

        chunks = [rows[s:s + SEARCH_ROWS] for s in range(0, len(rows), SEARCH_ROWS)]
        if threads > 1 and len(chunks) > 1:
            with ThreadPoolExecutor(min(int(threads), len(chunks))) as pool:
                parts = list(pool.map(run, chunks))
        else:
            parts = [run(c) for c in chunks]
        return [hits for part in parts for hits in part]

    # ----------------------------------------------------------------- token filters
    def _expr(self, node: Node, negate: bool) -> str:
        """The tree in negation normal form: NOT pushed to the leaves (De Morgan)."""
        if isinstance(node, Term):
            return self._without(node.dim) if negate else f"array_contains({TOK_FIELD}, {node.dim})"
        if isinstance(node, Not):
            return self._expr(node.child, not negate)
        if isinstance(node, (And, Or)):
            joiner = " or " if isinstance(node, And) == negate else " and "
            return "(" + joiner.join(self._expr(c, negate) for c in node.children) + ")"
        raise TypeError(f"not a query node: {node!r}")

    def _without(self, dim: int) -> str:
        holding = self._query(f"array_contains({TOK_FIELD}, {dim})", [ID_FIELD])
        return f"{ID_FIELD} not in [" + ", ".join(_literal(r[ID_FIELD]) for r in holding) + "]"

    def get(self, ids: Sequence[str]) -> SparseBatch:
        """The stored vectors, in the order asked; unknown ids raise KeyError."""
        ids = [str(i) for i in ids]
        found: dict[str, dict] = {}
        for s in range(0, len(ids), INSERT_ROWS):
            chunk = ids[s:s + INSERT_ROWS]
            for r in self._query(_in_expr(chunk), [ID_FIELD, VEC_FIELD]):
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

    def has_metadata(self) -> bool:
        """Whether the collection has the metadata fields (collections made before them do not)."""
        return self.has_meta

    def metadata(self, ids: Sequence[str]) -> list[dict]:
        """The stored metadata dicts of these documents, in the order asked; unknown ids raise KeyError."""
        ids = [str(i) for i in ids]
        if not self.has_meta:
            return [{} for _ in ids]
        found: dict[str, dict] = {}
        for s in range(0, len(ids), INSERT_ROWS):
            for r in self._query(_in_expr(ids[s:s + INSERT_ROWS]), [ID_FIELD, META_FIELD]):
                found[r[ID_FIELD]] = r[META_FIELD]
        missing = [i for i in ids if i not in found]
        if missing:
            raise KeyError(f"unknown ids: {missing[:5]}")
        return [found[i] for i in ids]

    def save(self, path: str | os.PathLike) -> None:
        """Flush the collection and write ``path`` (JSON: uri, collection, dim, index parameters, the
        vocabulary's name and tokens, so ``load`` restores ``where=`` strings)."""
        self._client.flush(self.collection)
        meta = {"format": FORMAT, "version": VERSION, "uri": self.uri, "collection": self.collection,
                "dim": self.dim, "index_params": self.index_params,
                "vocab": self.vocab.name if self.vocab is not None else None,
                "tokens": list(self.vocab.tokens) if self.vocab is not None else None}
        path = Path(path)
        atomic.write_text(path, json.dumps(meta, indent=2) + "\n")

    def stats(self) -> dict:
        return {"engine": "milvus", "uri": self.uri, "collection": self.collection, "docs": len(self),
                "dim": self.dim, "metric": "IP", **self.index_params}

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
