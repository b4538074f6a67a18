"""Export a SparseBatch to the files other sparse engines read (each format checked by its engine's rules).

* Float impact JSONL for Seismic, one document per line: ``{"id": "d1", "vector": {"dog": 1.25}}``
  (``seismic.SeismicIndex.build("docs.jsonl")``). Queries are written the same way
  (``write_queries_jsonl``); Seismic's ``search`` takes each line's tokens and weights.
* Integer impact JSONL for Anserini / pyserini (``JsonVectorCollection``, indexed with ``-impact
  -pretokenized``). Anserini reads each weight with Jackson's ``asInt()`` (a float is truncated, so
  unit-norm weights below 1 would all become 0) and repeats the token that many times in a
  whitespace-split pseudo-document. The scale, documented and stored by the caller: every weight
  ``w > 0`` becomes ``q = max(1, floor(w * scale + 0.5))`` (round half up, but never below 1), so every
  nonzero weight stays nonzero; ``|q / scale - w| <= 0.5 / scale`` except for ``w < 0.5 / scale``,
  lifted to ``1 / scale``. ``scale=100`` by default (pyserini's convention for SPLADE). Token names
  must not contain whitespace (they would split into two terms): such a token is an error. Queries
  go in a TSV topics file, ``q1<TAB>dog dog dog cat``: each token repeated its integer weight times,
  which Anserini's bag-of-words query over the pretokenized field turns into term boosts
  (``write_queries_tsv``; ``-topicReader TsvString -impact -pretokenized``). Checked with Anserini
  1.7.1 (pyserini 1.6.0's jar): same top-10 ids and scores as InvertedIndex on the same integers.
* OpenSearch / Elasticsearch ``rank_features``: an index mapping (JSON) and bulk NDJSON files
  (``{"index": {"_index", "_id"}}`` action line + source line per document), sent with
  ``curl -H 'Content-Type: application/x-ndjson' --data-binary @bulk-00000.ndjson URL/_bulk``. The
  field's rules: feature names without dots, each once per document, float32 values finite and at
  least ``FLOAT32_MIN_NORMAL``. Dots and percent signs in names are percent-encoded
  (``rank_feature_name``: ``"."`` -> ``"%2E"``), subnormal weights are lifted to the smallest normal
  float32.
* OpenSearch 3.3+ ``sparse_vector`` (neural sparse ANN search, the SEISMIC algorithm): the same bulk
  files under an index created with ``"index.sparse": true`` and a ``sparse_vector`` field whose
  ``method`` is ``seismic`` (``write_sparse_vector``). Its tokens are integers (the documentation's
  examples and "tokens are represented as integers"): each token is written as its dimension id
  (``"2003"``), the row of the vocabulary file. OpenSearch quantises the weights to bytes below a
  ceiling (``quantization_ceiling_ingest``, default 3; ``quantization_ceiling_search``, default 16):
  the mapping sets both just above the largest document / query weight, so unit-norm vectors use the
  whole byte range instead of a third (or a sixteenth) of it. Documented at
  https://docs.opensearch.org/latest/mappings/supported-field-types/sparse-vector/ and
  https://docs.opensearch.org/latest/vector-search/ai-search/neural-sparse-ann/.
* OpenSearch queries (``opensearch_queries`` / ``write_opensearch_queries``): one ``_search`` body per
  query row, written as a multi-search file (``_msearch``: a ``{"index": ...}`` line, then the body, per
  query; answers come back in file order), in one of two documented forms:
  ``neural_sparse`` with raw ``query_tokens`` (OpenSearch 2.11+, on rank_features and sparse_vector
  fields: https://docs.opensearch.org/latest/query-dsl/specialized/neural-sparse/), or a ``bool.should``
  of ``rank_feature`` clauses with the ``linear`` function and the query weight as ``boost`` (rank_features
  only; Elasticsearch 7.12+, OpenSearch 1.1+: opensearch-project/OpenSearch#1025). On a rank_features
  field both score a document by the dot product (up to the field's 9 significant bits).

Tokens are named by the batch's Vocabulary. A batch without one is written with the decimal
dimension ids as token names (``"2003"``). Every writer drops zero weights (rank_features rejects them
and a zero adds nothing to a dot product). Text is UTF-8 with non-ASCII tokens written as they are;
JSON escaping (quotes, backslashes, control characters) is the standard library's.
"""
from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from tokenspace import atomic
from tokenspace.sparse import SparseBatch

DEFAULT_SCALE = 100
DEFAULT_DOCS_PER_BULK_FILE = 10_000
FLOAT32_MIN_NORMAL = float(np.finfo(np.float32).tiny)  # 1.1754944e-38, Lucene FeatureField's lower bound


def token_names(batch: SparseBatch) -> list[str]:
    """The name of every dimension: vocabulary tokens, or decimal dim ids when the batch has none."""
    if batch.vocab is not None:
        return list(batch.vocab.tokens)
    return [str(i) for i in range(batch.dim)]


MAX_IMPACT = 2.0 ** 31  # integer impacts become Lucene term frequencies (Anserini): 32-bit


def quantize(values: np.ndarray, scale: float) -> np.ndarray:
    """Integer impacts ``max(1, floor(w * scale + 0.5))`` of positive weights (int64); zeros stay 0."""
    _check_scale(scale)
    # float64 so that e.g. 0.125 * 100 + 0.5 is not pushed across an integer by float32 rounding
    v = np.asarray(values, np.float64)
    top = float(v.max()) * scale if len(v) else 0.0
    if not top < MAX_IMPACT:  # int64 would wrap (1e300 once wrote every weight as 1)
        raise ValueError(f"scale {scale:g} makes the largest impact {top:.3g}; impacts must stay below "
                         f"{MAX_IMPACT:.3g} (Lucene stores 32-bit term frequencies): use a smaller scale")
    q = np.floor(v * scale + 0.5).astype(np.int64)
    return np.where(v > 0, np.maximum(q, 1), 0)


def rank_feature_name(token: str) -> str:
    """The rank_features name of a token: ``%`` and ``.`` percent-encoded (dots are not allowed)."""
    if not token:
        raise ValueError("rank_features cannot name a feature with the empty string")
    return token.replace("%", "%25").replace(".", "%2E")


def _check_scale(scale) -> None:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")


def check_ids(batch: SparseBatch, ids: Sequence[str]) -> list[str]:
    """The ids of an export's rows as strings, one per row and unique (every export format keys on them)."""
    ids = [str(i) for i in ids]
    if len(ids) != len(batch):
        raise ValueError(f"got {len(ids)} ids for a batch of {len(batch)} rows")
    if len(set(ids)) != len(ids):
        raise ValueError("document ids must be unique")
    return ids


def _dump(obj) -> str:
    # ensure_ascii=False keeps WordPiece tokens such as "é" readable; the file is written as UTF-8
    return json.dumps(obj, ensure_ascii=False)


def _check_whitespace_free(batch: SparseBatch, names: list[str]) -> None:
    used = np.unique(batch.indices[batch.values > 0])
    for j in used.tolist():
        t = names[j]
        if not t or t.split() != [t]:
            raise ValueError(f"token {t!r} (dim {j}) is empty or contains whitespace: Anserini's "
                             "pretokenized pseudo-documents split on whitespace, rename it first")


def _row_fragments(batch: SparseBatch, scale: float | None, names: list[str] | None = None,
                   min_value: float = 0.0) -> Iterator[str]:
    """The JSON object text ``{"tok": w, ...}`` of each row, zero weights dropped.

    Built from pre-escaped token names and numpy's shortest round-trip text of each float32 weight
    (``0.3``, not ``0.30000001192092896``), so a 1M-row export is not a per-weight json.dumps loop.
    With ``scale``, weights are integers (``quantize``). Float weights below ``min_value`` are raised
    to it.
    """
    if batch.nnz and not np.all(np.isfinite(batch.values)):
        raise ValueError("cannot export non-finite weights")
    if batch.nnz and batch.values.min() < 0:
        raise ValueError("cannot export negative weights")
    names = [_dump(t) for t in (names or token_names(batch))]  # quotes, backslashes, control chars escaped once
    for i in range(len(batch)):
        idx, val = batch.row(i)
        keep = val > 0
        if scale is not None:
            text = quantize(val[keep], scale).astype(str)
        else:
            text = np.maximum(val[keep], np.float32(min_value)).astype(str)
        yield "{" + ", ".join(f"{names[j]}: {w}" for j, w in zip(idx[keep].tolist(), text.tolist())) + "}"


def write_jsonl(batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike) -> Path:
    """Float impact JSONL (Seismic): one ``{"id", "vector": {token: weight}}`` line per row."""
    return _write_jsonl(batch, ids, path, scale=None, id_key="id")


def write_jsonl_quantized(
    batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike, scale: float = DEFAULT_SCALE
) -> Path:
    """Integer impact JSONL (Anserini/pyserini ``JsonVectorCollection``): weights ``quantize(w, scale)``.

    Every nonzero weight stays nonzero (at least 1). Anserini indexes a folder and parses every file
    in it as JSON: put this file alone in one (``write_queries_tsv`` goes beside that folder)::

        java -cp anserini-fatjar.jar io.anserini.index.IndexCollection -collection JsonVectorCollection \\
            -input collection/ -index idx/ -generator DefaultLuceneDocumentGenerator -impact -pretokenized
        java -cp anserini-fatjar.jar io.anserini.search.SearchCollection -index idx/ -topics queries.tsv \\
            -topicReader TsvString -output run.txt -impact -pretokenized -hits 10
    """
    _check_scale(scale)
    _check_whitespace_free(batch, token_names(batch))
    return _write_jsonl(batch, ids, path, scale=scale, id_key="id")


def write_queries_jsonl(batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike) -> Path:
    """Seismic's query file: float ``{"id", "vector"}`` lines, the documents' format."""
    return _write_jsonl(batch, ids, path, scale=None, id_key="id")


def write_queries_tsv(
    batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike, scale: float = DEFAULT_SCALE
) -> Path:
    """Anserini's query file for an integer impact index: ``qid<TAB>tok tok ...``, each token repeated
    ``quantize(w, scale)`` times (use the documents' scale). Read with ``-topicReader TsvString
    -impact -pretokenized``: the score is then the dot product of the two integer vectors."""
    _check_scale(scale)
    ids = check_ids(batch, ids)
    bad = [i for i in ids if not i or any(c in i for c in "\t\r\n")]
    if bad:
        raise ValueError(f"query id {bad[0]!r} is empty or holds a tab or newline (the TSV separators)")
    names = token_names(batch)
    _check_whitespace_free(batch, names)
    if batch.nnz and not np.all(np.isfinite(batch.values)):
        raise ValueError("cannot export non-finite weights")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        for qid, i in zip(ids, range(len(batch))):
            idx, val = batch.row(i)
            keep = val > 0
            reps = quantize(val[keep], scale).tolist()
            f.write(qid + "\t" + " ".join(" ".join([names[j]] * r) for j, r in zip(idx[keep].tolist(), reps)) + "\n")
    return path


def _write_jsonl(batch, ids, path, scale, id_key) -> Path:
    ids = check_ids(batch, ids)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = _dump(id_key)
    # a crash never leaves a half-written export under the final name
    with atomic.atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f'{{{key}: {_dump(doc_id)}, "vector": {row}}}\n'
                     for doc_id, row in zip(ids, _row_fragments(batch, scale)))
    return path


def rank_features_mapping(field: str = "vector") -> dict:
    """Index body for OpenSearch/Elasticsearch: ``PUT /<index>`` with this JSON.

    The id is the document ``_id``; the sparse vector is one ``rank_features`` field. Query it with
    ``opensearch_queries`` (neural_sparse or rank_feature bodies), which sum to the dot product up to
    rank_features' storage precision (9 significant bits, about 0.4% relative error).
    """
    _check_field(field)
    return {"mappings": {"properties": {field: {"type": "rank_features"}}}}


def write_rank_features(
    batch: SparseBatch,
    ids: Sequence[str],
    out_dir: str | os.PathLike,
    index: str = "tokenspace",
    field: str = "vector",
    docs_per_file: int = DEFAULT_DOCS_PER_BULK_FILE,
) -> list[Path]:
    """Write ``mapping.json`` and ``bulk-00000.ndjson``, ``bulk-00001.ndjson``, ... into ``out_dir``.

    Bulk files hold at most ``docs_per_file`` documents each (Elasticsearch advises requests of a few
    MB). Returns the paths written, mapping first. Feature names are ``rank_feature_name(token)``;
    float weights are written as they are (rank_features keeps ~9 significant bits of them), subnormal
    ones lifted to FLOAT32_MIN_NORMAL.
    """
    ids = check_ids(batch, ids)
    mapping = rank_features_mapping(field)
    if docs_per_file <= 0:
        raise ValueError("docs_per_file must be positive")
    names = [rank_feature_name(t) for t in token_names(batch)]
    if len(set(names)) != len(names):  # only if two tokens differ by an encoded '.' vs a literal "%2E"
        raise ValueError("two tokens map to the same rank_features name")
    return _write_bulk(batch, ids, out_dir, mapping, names, index, field, docs_per_file)


def _write_bulk(batch, ids, out_dir, mapping: dict, names: list[str], index: str, field: str,
                docs_per_file: int) -> list[Path]:
    """``mapping.json`` and the bulk files of an OpenSearch export, the feature names given."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "mapping.json"]
    atomic.write_text(written[0], json.dumps(mapping, indent=2) + "\n")
    # subnormal weights lifted: FeatureField rejects them, and sparse_vector segments below the ANN
    # threshold are indexed as rank_features (neural-sparse-ann: "Hybrid indexing behavior")
    rows = zip(ids, _row_fragments(batch, None, names=names, min_value=FLOAT32_MIN_NORMAL))
    for start in range(0, len(ids), docs_per_file):
        written.append(out / f"bulk-{start // docs_per_file:05d}.ndjson")
        with atomic.atomic_open(written[-1], "w", encoding="utf-8", newline="\n") as f:
            for doc_id, row in itertools.islice(rows, docs_per_file):
                f.write(_dump({"index": {"_index": index, "_id": doc_id}}) + "\n")
                f.write(f"{{{_dump(field)}: {row}}}\n")
    return written


# the sparse_vector field's documented method parameters (mappings/supported-field-types/sparse-vector)
SPARSE_VECTOR_PARAMETERS = ("n_postings", "cluster_ratio", "summary_prune_ratio", "approximate_threshold",
                            "quantization_ceiling_search", "quantization_ceiling_ingest")
FIELD_TYPES = ("rank_features", "sparse_vector")
QUERY_TYPES = ("neural_sparse", "rank_feature")


def _check_field(field: str) -> None:
    if not isinstance(field, str) or not field or "." in field:
        raise ValueError(f"field must be a non-empty name without dots, got {field!r}")


def quantization_ceiling(values) -> float:
    """A ``quantization_ceiling_*`` for weights ``values``: their largest, rounded up to two significant
    digits (OpenSearch maps [0, ceiling] onto a byte; a weight above it is cut to it). 1.0 for none."""
    v = np.asarray(values, np.float64)
    top = float(v.max()) if v.size else 0.0
    if not top > 0 or not math.isfinite(top):
        return 1.0
    step = 10.0 ** (math.floor(math.log10(top)) - 1)
    # the weights are float32: 0.73 is 0.7300000190734863, whose ceiling is 0.73 (1e-6 below the float32
    # ulp of a 2-digit mantissa), not 0.74; round(): 0.73, not 0.7300000000000001
    ceiling = round(math.ceil(top / step * (1 - 1e-6)) * step, 12)
    return ceiling if np.float32(ceiling) >= np.float32(top) else round(ceiling + step, 12)


def sparse_vector_mapping(field: str = "vector", parameters: dict | None = None) -> dict:
    """Index body for OpenSearch 3.3+ neural sparse ANN search: ``PUT /<index>`` with this JSON.

    ``"index.sparse": true`` and one ``sparse_vector`` field with ``method`` ``seismic`` and
    ``parameters`` (any of SPARSE_VECTOR_PARAMETERS; OpenSearch's defaults for the rest). Documented at
    https://docs.opensearch.org/latest/mappings/supported-field-types/sparse-vector/ ("Step 1: Create an
    index")."""
    _check_field(field)
    parameters = dict(parameters or {})
    unknown = sorted(set(parameters) - set(SPARSE_VECTOR_PARAMETERS))
    if unknown:
        raise ValueError(f"unknown sparse_vector parameter(s) {unknown}; known: {', '.join(SPARSE_VECTOR_PARAMETERS)}")
    for k, v in parameters.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
            raise ValueError(f"sparse_vector parameter {k} must be a finite number >= 0, got {v!r}")
    return {"settings": {"index": {"sparse": True}},
            "mappings": {"properties": {field: {"type": "sparse_vector",
                                                "method": {"name": "seismic", "parameters": parameters}}}}}


def write_sparse_vector(
    batch: SparseBatch,
    ids: Sequence[str],
    out_dir: str | os.PathLike,
    index: str = "tokenspace",
    field: str = "vector",
    docs_per_file: int = DEFAULT_DOCS_PER_BULK_FILE,
    parameters: dict | None = None,
    query_ceiling: float | None = None,
) -> list[Path]:
    """``mapping.json`` (``sparse_vector_mapping``) and bulk files for OpenSearch 3.3+ ``sparse_vector``.

    Tokens are written as their dimension ids (``"2003"``: sparse_vector tokens are integers). The
    mapping's ``quantization_ceiling_ingest`` is ``quantization_ceiling`` of the documents' weights and
    ``quantization_ceiling_search`` that of the queries' (``query_ceiling``: e.g.
    ``quantization_ceiling(queries.values)``; without it, the documents' as well); ``parameters``
    overrides either and sets the others."""
    ids = check_ids(batch, ids)
    if docs_per_file <= 0:
        raise ValueError("docs_per_file must be positive")
    ingest = quantization_ceiling(batch.values)
    defaults = {"quantization_ceiling_ingest": ingest,
                "quantization_ceiling_search": ingest if query_ceiling is None else float(query_ceiling)}
    mapping = sparse_vector_mapping(field, {**defaults, **(parameters or {})})
    return _write_bulk(batch, ids, out_dir, mapping, [str(j) for j in range(batch.dim)], index, field,
                       docs_per_file)


def _weights(values: np.ndarray) -> list[float]:
    # float32 weights as their shortest text (0.3, not 0.30000001192092896), as the documents are written
    return [float(t) for t in np.asarray(values, np.float32).astype(str)]


def opensearch_queries(batch: SparseBatch, field: str = "vector", field_type: str = "rank_features",
                       query_type: str = "neural_sparse", k: int = 10) -> list[dict]:
    """One ``_search`` body per row of ``batch``: the query that scores the exported documents by their
    dot product with the row, the top ``k`` returned (``"size"``).

    * ``neural_sparse`` (https://docs.opensearch.org/latest/query-dsl/specialized/neural-sparse/, "Using
      raw sparse vectors"): ``{"neural_sparse": {field: {"query_tokens": {token: weight}}}}``, tokens named
      as the documents were (``rank_feature_name`` on rank_features, dimension ids on sparse_vector); on
      sparse_vector with ``method_parameters`` ``k`` and ``top_n`` = the row's token count (every query
      token kept; ``heap_factor`` is left to OpenSearch's default, the recall/speed knob to tune there).
    * ``rank_feature`` (rank_features fields only): ``{"bool": {"should": [{"rank_feature": {"field":
      "<field>.<token>", "linear": {}, "boost": weight}}, ...]}}``.

    A row without a token is ``{"match_none": {}}``: it matches nothing, as in tokenspace."""
    _check_field(field)
    if field_type not in FIELD_TYPES:
        raise ValueError(f"field_type must be one of {FIELD_TYPES}, got {field_type!r}")
    if query_type not in QUERY_TYPES:
        raise ValueError(f"query_type must be one of {QUERY_TYPES}, got {query_type!r}")
    if field_type == "sparse_vector" and query_type == "rank_feature":
        raise ValueError("rank_feature queries read rank_features fields; a sparse_vector field is queried "
                         "with neural_sparse")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    if batch.nnz and (not np.all(np.isfinite(batch.values)) or batch.values.min() < 0):
        raise ValueError("cannot export non-finite or negative query weights")
    names = ([str(j) for j in range(batch.dim)] if field_type == "sparse_vector"
             else [rank_feature_name(t) for t in token_names(batch)])
    bodies = []
    for i in range(len(batch)):
        idx, val = batch.row(i)
        keep = val > 0
        pairs = list(zip((names[j] for j in idx[keep].tolist()), _weights(val[keep])))
        if not pairs:
            query = {"match_none": {}}
        elif query_type == "rank_feature":
            query = {"bool": {"should": [{"rank_feature": {"field": f"{field}.{n}", "linear": {}, "boost": w}}
                                         for n, w in pairs]}}
        else:
            inner = {"query_tokens": dict(pairs)}
            if field_type == "sparse_vector":
                inner["method_parameters"] = {"k": k, "top_n": len(pairs)}
            query = {"neural_sparse": {field: inner}}
        bodies.append({"size": k, "query": query})
    return bodies


def write_opensearch_queries(batch: SparseBatch, path: str | os.PathLike, index: str = "tokenspace",
                             field: str = "vector", field_type: str = "rank_features",
                             query_type: str = "neural_sparse", k: int = 10) -> Path:
    """The rows of ``batch`` as a multi-search file (``opensearch_queries`` bodies), run with
    ``curl -H 'Content-Type: application/x-ndjson' --data-binary @queries.ndjson URL/_msearch``: per
    query an ``{"index": index}`` line and the body line (the multi-search API's NDJSON, answered in file
    order: https://docs.opensearch.org/latest/api-reference/search-apis/multi-search/)."""
    bodies = opensearch_queries(batch, field, field_type, query_type, k)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        for body in bodies:
            f.write(_dump({"index": index}) + "\n" + _dump(body) + "\n")
    return path


def read_jsonl(path: str | os.PathLike, vocab=None, dim: int | None = None) -> tuple[SparseBatch, list[str]]:
    """Read an impact JSONL (documents ``id`` or topics ``qid``) back, tokens through ``vocab`` or dim ids."""
    if vocab is None and dim is None:
        raise ValueError("read_jsonl needs vocab or dim")
    ids, rows = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                ids.append(str(doc["id"] if "id" in doc else doc["qid"]))
                vec = doc["vector"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not an impact JSONL line ({e})") from None
            rows.append(vec if vocab is not None else {int(k): v for k, v in vec.items()})
    return SparseBatch.from_dicts(rows, dim=dim, vocab=vocab), ids


__all__ = [
    "DEFAULT_SCALE",
    "FIELD_TYPES",
    "FLOAT32_MIN_NORMAL",
    "QUERY_TYPES",
    "SPARSE_VECTOR_PARAMETERS",
    "opensearch_queries",
    "quantization_ceiling",
    "quantize",
    "rank_feature_name",
    "rank_features_mapping",
    "read_jsonl",
    "sparse_vector_mapping",
    "token_names",
    "write_jsonl",
    "write_jsonl_quantized",
    "write_opensearch_queries",
    "write_queries_jsonl",
    "write_queries_tsv",
    "write_rank_features",
    "write_sparse_vector",
]
