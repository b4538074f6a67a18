"""MANIFEST.json of an inverted index as one typed, validated schema.

The manifest is the commit point of an index folder (storage.py): every file the loader opens is
named here, so a manifest that parses but has the wrong shape must never reach the loader as a dict.
``parse`` checks every field's type and range (and that no unknown field is present) and returns frozen
dataclasses; any shape error is an IndexCorruptError naming the file and the field
(``MANIFEST.json: segments[1].n: expected an int >= 1, got 'abc'``). ``Manifest.to_dict`` writes the
same schema, so reading and writing cannot drift apart.

Format versions: 3 adds the document count ``n`` (so an emptied or repeated segment list is caught)
and the optional per-segment row metadata file (metadata.py); 4 adds each segment's impact-head files
(segment.HEADS); 5 adds the optional hub prior (``hub_prior``: the query bank's three CSR arrays, its K and
weight; each segment's ``prior`` file, float32 per row, named like tombstones); 6 adds the optional
collection ``info`` ({"model": the reference of the model that encoded the rows, "ranking": the default
ranking's fields}: what a search session needs besides the rows, so an index folder is searchable on its
own); 7 adds the optional ``approx_mass`` (the build's mass cut of the approximate lists, kept for later
adds and compaction); 9 lets a segment leave out its three residual-list files (segment.RESIDUAL: all or
none; built with residual_lists=False); 10 stores impact bands instead of nested heads (segment.BANDS; a
segment saved in place keeps its older files). Versions 2 (no ``n``, no metadata), 3 (no heads: bands
computed at load), 4 (no hub prior), 5 (no info), 6 (no mass cut), 7-8 (every segment with its residual
lists) and 9 (nested heads: split into bands at load) are still read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tokenspace.index import layout, storage
from tokenspace.index.segment import ARRAYS, BANDS, HEADS, RESIDUAL
from tokenspace.index.storage import VERSION, IndexCorruptError

SEGMENT_NAME = re.compile(r"seg-[0-9]{6}")
META_FILE = "metadata.jsonl"  # optional per-segment file: one JSON object (a row's fields) a line
_U32 = 1 << 32


@dataclass(frozen=True)
class FileEntry:
    """A file the manifest names: its path relative to the index folder, byte size and crc32."""

    file: str
    bytes: int
    crc32: int


@dataclass(frozen=True)
class SegmentEntry:
    name: str  # folder name, seg-NNNNNN
    n: int  # rows, deleted ones included
    top_n: int  # approx_top_n the segment was built with (0 = none)
    files: dict[str, FileEntry]  # relative path -> entry: the ARRAYS .npy files (+ metadata.jsonl)
    tombstones: FileEntry | None  # uint8[n], 1 = deleted
    prior: FileEntry | None = None  # float32[n]: each row's CSLS hubness r_D (hubness.py), with a hub prior

    @property
    def metadata(self) -> FileEntry | None:
        return self.files.get(f"{self.name}/{META_FILE}")


BANK_ARRAYS = ("indptr", "indices", "values")  # the query bank's CSR arrays (SparseBatch)
HUB_FILE = re.compile(r"hub-[0-9]{6}\.(indptr|indices|values)\.npy")


@dataclass(frozen=True)
class HubPrior:
    """The index's hub prior: the query bank (files by BANK_ARRAYS name), its K and the default weight
    search subtracts weight x r_D with (hubness.py)."""

    k: int
    weight: float
    bank: dict[str, FileEntry]
    ordered: bool = True  # every segment's documents in hubness order (InvertedIndex.set_hub_prior)


@dataclass(frozen=True)
class Manifest:
    dim: int
    n: int | None  # total rows of all segments (None: a version 2 manifest, which did not record it)
    dense_fraction: float
    top_n: int  # the index's approx_top_n (0 = none); the key predates the rename
    generation: int
    next_segment: int
    segments: tuple[SegmentEntry, ...]
    vocab: FileEntry | None
    vocab_name: str | None
    token_filter: dict | None  # {"deny": [dims], "allow": [dims] or None}
    version: int = VERSION
    hub_prior: HubPrior | None = None
    info: dict | None = None  # {"model": str or None, "ranking": {field: value} or None} (INFO_FIELDS)
    approx_mass: float | None = None  # the index's approx_mass (None = no mass cut)

    def files(self) -> dict[str, dict]:
        """Every file to check: relative path -> {bytes, crc32}."""
        out = {}
        for s in self.segments:
            out.update({rel: {"bytes": e.bytes, "crc32": e.crc32} for rel, e in s.files.items()})
            for e in (s.tombstones, s.prior):
                if e:
                    out[e.file] = {"bytes": e.bytes, "crc32": e.crc32}
        if self.hub_prior:
            out.update({e.file: {"bytes": e.bytes, "crc32": e.crc32} for e in self.hub_prior.bank.values()})
        if self.vocab:
            out[self.vocab.file] = {"bytes": self.vocab.bytes, "crc32": self.vocab.crc32}
        return out

    def to_dict(self) -> dict:
        """The body storage.write_manifest writes (format, version and the crc are added there)."""
        def entry(e: FileEntry) -> dict:
            return {"bytes": e.bytes, "crc32": e.crc32}

        return {
            "dim": self.dim, "n": self.n, "dense_fraction": self.dense_fraction, "top_n": self.top_n,
            "generation": self.generation, "next_segment": self.next_segment,
            "block": layout.BLOCK, "posting_chunk": layout.POSTING_CHUNK, "token_filter": self.token_filter,
            "vocab": None if self.vocab is None else dict(entry(self.vocab), file=self.vocab.file, name=self.vocab_name),
            "segments": [{"name": s.name, "n": s.n, "top_n": s.top_n,
                          "files": {rel: entry(e) for rel, e in s.files.items()},
                          "tombstones": None if s.tombstones is None else dict(entry(s.tombstones), file=s.tombstones.file),
                          "prior": None if s.prior is None else dict(entry(s.prior), file=s.prior.file)}
                         for s in self.segments],
            "hub_prior": None if self.hub_prior is None else {
                "k": self.hub_prior.k, "weight": self.hub_prior.weight, "ordered": self.hub_prior.ordered,
                "bank": {a: dict(entry(e), file=e.file) for a, e in self.hub_prior.bank.items()}},
            # written only when set: an index without it is what versions before 6 wrote too
            **({"info": self.info} if self.info else {}),
            # written only when set: an index without it is what versions before 7 wrote too
            **({"approx_mass": self.approx_mass} if self.approx_mass is not None else {}),
        }


# ----------------------------------------------------------------------------- validation
class _Fields:
    """Typed getters that raise IndexCorruptError naming the file and the field's path."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, field: str, why: str):
        raise IndexCorruptError(f"{self.path}: {field}: {why} (manifest damaged or edited)")

    def obj(self, value, field: str, required: set[str], optional: frozenset[str] = frozenset()) -> dict:
        if not isinstance(value, dict):
            self.fail(field, f"expected an object, got {_show(value)}")
        missing = sorted(required - value.keys())
        if missing:
            self.fail(f"{field}.{missing[0]}" if field else missing[0], "missing")
        extra = sorted(value.keys() - required - optional)
        if extra:
            self.fail(f"{field}.{extra[0]}" if field else extra[0], "unknown field")
        return value

    def int_(self, value, field: str, lo: int = 0, hi: int | None = None) -> int:
        # bool is an int in Python, never in this schema
        if not isinstance(value, int) or isinstance(value, bool) or value < lo or (hi is not None and value >= hi):
            rng = f"in [{lo}, {hi})" if hi is not None else f">= {lo}"
            self.fail(field, f"expected an int {rng}, got {_show(value)}")
        return value

    def str_(self, value, field: str, pattern: re.Pattern | None = None, exact: str | None = None) -> str:
        if not isinstance(value, str) or (pattern and not pattern.fullmatch(value)) or (exact and value != exact):
            want = f"{exact!r}" if exact else f"a string matching {pattern.pattern}" if pattern else "a string"
            self.fail(field, f"expected {want}, got {_show(value)}")
        return value

    def entry(self, value, field: str, file: str | None = None, pattern: re.Pattern | None = None,
              keyed: bool = False) -> FileEntry:
        """{bytes, crc32, file}: ``file`` must equal ``file`` or match ``pattern``. keyed: the entry is
        known by its key in a map (a segment's files), has no "file" field, and ``file`` is that key."""
        v = self.obj(value, field, {"bytes", "crc32"} | (set() if keyed else {"file"}))
        name = file if keyed else self.str_(v["file"], f"{field}.file", pattern=pattern, exact=file)
        return FileEntry(name, self.int_(v["bytes"], f"{field}.bytes"), self.int_(v["crc32"], f"{field}.crc32", 0, _U32))


def _show(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def parse(doc, path: Path) -> Manifest:
    """The validated Manifest of a JSON document whose format, version and crc storage.py has checked."""
    f = _Fields(path)
    version = doc["version"]
    top = {"format", "version", "dim", "dense_fraction", "top_n", "generation", "next_segment", "segments",
           "vocab", "block", "posting_chunk", "token_filter"} | ({"n"} if version >= 3 else set()) | (
               {"hub_prior"} if version >= 5 else set())
    f.obj(doc, "", top, frozenset(({"info"} if version >= 6 else set()) | ({"approx_mass"} if version >= 7 else set())))
    dim = f.int_(doc["dim"], "dim", 1, 1 << 31)
    frac = doc["dense_fraction"]
    if not isinstance(frac, (int, float)) or isinstance(frac, bool) or not 0 < frac < float("inf"):
        f.fail("dense_fraction", f"expected a finite number > 0, got {_show(frac)}")
    if doc["block"] != layout.BLOCK or isinstance(doc["block"], bool):
        f.fail("block", f"block size {_show(doc['block'])}, this code uses {layout.BLOCK}")
    if doc["posting_chunk"] != layout.POSTING_CHUNK or isinstance(doc["posting_chunk"], bool):
        f.fail("posting_chunk", f"posting chunk {_show(doc['posting_chunk'])}, this code uses {layout.POSTING_CHUNK}")
    generation = f.int_(doc["generation"], "generation", 1)
    next_segment = f.int_(doc["next_segment"], "next_segment", 1)
    top_n = f.int_(doc["top_n"], "top_n")
    vocab, vocab_name = None, None
    if doc["vocab"] is not None:
        v = f.obj(doc["vocab"], "vocab", {"file", "bytes", "crc32", "name"})
        # versions before 8 name it vocab.txt; from 8 each generation's own name, or an older index's
        # vocab.txt that an in-place save kept
        vocab = f.entry({k: v[k] for k in ("file", "bytes", "crc32")}, "vocab",
                        **({"pattern": storage.VOCAB_FILE} if version >= 8 else {"file": storage.VOCAB}))
        vocab_name = f.str_(v["name"], "vocab.name")
    token_filter = _token_filter(f, doc["token_filter"], dim, version)
    segs = doc["segments"]
    if not isinstance(segs, list):
        f.fail("segments", f"expected a list, got {_show(segs)}")
    segments = tuple(_segment(f, s, f"segments[{i}]", version, next_segment) for i, s in enumerate(segs))
    names = [s.name for s in segments]
    if len(set(names)) != len(names):
        dup = next(x for x in names if names.count(x) > 1)
        f.fail("segments", f"segment {dup} listed twice")
    hub = _hub_prior(f, doc["hub_prior"]) if version >= 5 else None
    with_prior = [s.name for s in segments if s.prior is not None]
    if hub is None and with_prior:
        f.fail("segments", f"segment {with_prior[0]} has a prior file but the index has no hub_prior")
    if hub is not None and len(with_prior) != len(segments):
        missing = next(s.name for s in segments if s.prior is None)
        f.fail("segments", f"segment {missing} has no prior file but the index has a hub_prior")
    n = None
    if version >= 3:
        n = f.int_(doc["n"], "n")
        total = sum(s.n for s in segments)
        if total != n:
            f.fail("segments", f"{len(segments)} segment(s) of {total} rows, the index has n = {n}")
    info = _info(f, doc["info"]) if "info" in doc else None
    mass = doc.get("approx_mass")
    if mass is not None and (not isinstance(mass, (int, float)) or isinstance(mass, bool) or not 0 < mass < 1):
        f.fail("approx_mass", f"expected a number in (0, 1), got {_show(mass)}")
    return Manifest(dim, n, float(frac), top_n, generation, next_segment, segments, vocab, vocab_name,
                    token_filter, version, hub, info, None if mass is None else float(mass))


INFO_FIELDS = ("model", "ranking")


def check_info(info) -> dict | None:
    """An index's ``info`` as the manifest stores it (None when empty); ValueError for a shape the
    reader would refuse, raised before anything is written."""
    if not info:
        return None
    if not isinstance(info, dict) or set(info) - set(INFO_FIELDS):
        raise ValueError(f"index info: a dict of {', '.join(INFO_FIELDS)}, got {info!r:.80}")
    if not isinstance(info.get("model"), (str, type(None))) or not isinstance(info.get("ranking"), (dict, type(None))):
        raise ValueError(f"index info: model is a string or None, ranking a dict or None, got {info!r:.80}")
    return {k: info[k] for k in INFO_FIELDS if info.get(k) is not None} or None


def _info(f: _Fields, value) -> dict | None:
    """The collection info: the model reference (a string or null) and the ranking (an object or null;
    its fields are checked where a search reads them, explain/ranking.py)."""
    if value is None:
        return None
    v = f.obj(value, "info", set(), frozenset(INFO_FIELDS))
    if v.get("model") is not None:
        f.str_(v["model"], "info.model")
    if v.get("ranking") is not None and not isinstance(v["ranking"], dict):
        f.fail("info.ranking", f"expected an object or null, got {_show(v['ranking'])}")
    return dict(v)


def _hub_prior(f: _Fields, value) -> HubPrior | None:
    if value is None:
        return None
    # "ordered" came after the first version-5 indexes: one without it has its documents in their own order
    v = f.obj(value, "hub_prior", {"k", "weight", "bank"}, frozenset({"ordered"}))
    ordered = v.get("ordered", False)
    if not isinstance(ordered, bool):
        f.fail("hub_prior.ordered", f"expected true or false, got {_show(ordered)}")
    k = f.int_(v["k"], "hub_prior.k", 1)
    w = v["weight"]
    if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0 <= w < float("inf"):
        f.fail("hub_prior.weight", f"expected a finite number >= 0, got {_show(w)}")
    bank = f.obj(v["bank"], "hub_prior.bank", set(BANK_ARRAYS))
    entries = {a: f.entry(bank[a], f"hub_prior.bank.{a}", pattern=HUB_FILE) for a in BANK_ARRAYS}
    for a, e in entries.items():
        if not e.file.endswith(f".{a}.npy"):
            f.fail(f"hub_prior.bank.{a}.file", f"{e.file!r} is not a {a} file")
    return HubPrior(k, float(w), entries, ordered)


def _token_filter(f: _Fields, value, dim: int, version: int) -> dict | None:
    if value is None:
        return None
    v = f.obj(value, "token_filter", {"deny", "allow"}, frozenset({"scale", "renormalize"} if version >= 5 else ()))
    out = {}
    if "scale" in v:  # generic tokens' factors (token_filter.py): [[dim, factor in (0, 1]], ...], dims rising
        pairs = v["scale"]
        if not isinstance(pairs, list):
            f.fail("token_filter.scale", f"expected a list of [dim, factor] pairs, got {_show(pairs)}")
        for j, p in enumerate(pairs):
            if not (isinstance(p, list) and len(p) == 2 and isinstance(p[1], (int, float))
                    and not isinstance(p[1], bool) and 0 < p[1] <= 1):
                f.fail(f"token_filter.scale[{j}]", f"expected [dim, factor in (0, 1]], got {_show(p)}")
            f.int_(p[0], f"token_filter.scale[{j}][0]", 0, dim)
            if j and p[0] <= pairs[j - 1][0]:
                f.fail(f"token_filter.scale[{j}]", "dims must rise")
        if not isinstance(v.get("renormalize"), bool):
            f.fail("token_filter.renormalize", f"expected true or false, got {_show(v.get('renormalize'))}")
        out.update(scale=pairs, renormalize=v["renormalize"])
    for key in ("deny", "allow"):
        items = v[key]
        if items is None and key == "allow":
            out[key] = None
            continue
        if not isinstance(items, list):
            f.fail(f"token_filter.{key}", f"expected a list of dims, got {_show(items)}")
        out[key] = [f.int_(x, f"token_filter.{key}[{j}]", 0, dim) for j, x in enumerate(items)]
    return out


def _segment(f: _Fields, value, field: str, version: int, next_segment: int) -> SegmentEntry:
    v = f.obj(value, field, {"name", "n", "top_n", "files", "tombstones"} | ({"prior"} if version >= 5 else set()))
    name = f.str_(v["name"], f"{field}.name", pattern=SEGMENT_NAME)
    if int(name[4:]) >= next_segment:
        f.fail(f"{field}.name", f"{name} is not below next_segment {next_segment}")
    n = f.int_(v["n"], f"{field}.n", 1)
    top_n = f.int_(v["top_n"], f"{field}.top_n")
    files_doc = v["files"]
    # the impact heads' files: nested heads from version 4, bands from 10, where a segment saved in place
    # keeps the files it was written with (a version-10 index may hold segments of all three kinds)
    kinds = {"bands": BANDS, "heads": HEADS, "none": ()}
    if version < 10:
        kind = "heads" if version >= 4 else "none"
    else:
        names = files_doc.keys() if isinstance(files_doc, dict) else set()
        kind = next((k for k in ("bands", "heads") if f"{name}/{kinds[k][0]}.npy" in names), "none")
    arrays = {f"{name}/{a}.npy" for a in ARRAYS if a not in BANDS} | {f"{name}/{a}.npy" for a in kinds[kind]}
    meta = frozenset({f"{name}/{META_FILE}"} if version >= 3 else set())
    residual = {f"{name}/{a}.npy" for a in RESIDUAL}
    if version >= 9 and isinstance(files_doc, dict) and not residual & files_doc.keys():
        arrays -= residual  # a segment built with residual_lists=False: none of the three
    f.obj(files_doc, f"{field}.files", arrays, meta)
    files = {rel: f.entry(e, f"{field}.files[{rel!r}]", file=rel, keyed=True)
             for rel, e in files_doc.items()}
    tomb = None
    if v["tombstones"] is not None:
        tomb = f.entry(v["tombstones"], f"{field}.tombstones", pattern=re.compile(re.escape(name) + r"\.del-[0-9]{6}\.npy"))
    prior = None
    if version >= 5 and v["prior"] is not None:
        prior = f.entry(v["prior"], f"{field}.prior", pattern=re.compile(re.escape(name) + r"\.prior-[0-9]{6}\.npy"))
    return SegmentEntry(name, n, top_n, files, tomb, prior)


def read(root: Path) -> Manifest:
    """The validated manifest of the index folder ``root`` (format, checksum, version: storage.py; shape:
    ``parse``). IndexCorruptError for any damage, FileNotFoundError when there is no manifest."""
    return parse(storage.read_manifest(Path(root)), Path(root) / storage.MANIFEST)
