"""Request and response models of the HTTP API (they are also its OpenAPI schema).

Limits live here so that out-of-range input is refused with a 422 naming the field before any work
is done; token-level checks (unknown tokens, malformed boolean queries) need the vocabulary and are
made by the service (400).
"""
from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

MAX_TEXT = 500  # characters of a query text: the text tower truncates to a few dozen tokens anyway
MAX_K = 100
MAX_TOKENS = 32  # entries of must / must_not / steer
MAX_STEER = 100.0
# bytes of a JSON request body: a request at every limit above is a few KB; refused (413) while it
# arrives, before parsing (serve/body_limit.py)
MAX_JSON_BYTES = 64 * 1024
# a text must hold a character that str.strip() keeps: in the schema too, so that schema-valid means
# accepted. The whitespace is spelled out (Python's str.isspace set) because "\S" means a different set
# in each regex flavour: Python's re, pydantic's Rust regex and JSON Schema's ECMA-262 (a text of
# "\u001d" matched the schema's "\S" and was refused as blank)
BLANK = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = rf"[^{BLANK}]"


def _integral(v):
    # JSON Schema's "integer" includes 36.0 (a number with no fraction), which strict int refuses; other
    # floats stay floats (refused), and a bool is never an int here
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


# a count: strict (no "10", no true) but as JSON Schema reads "integer"
Count = Annotated[int, BeforeValidator(_integral)]

# a steering factor: in the schema (so clients and fuzzers see the range), not only in a validator
Factor = Annotated[float, Field(ge=0, le=MAX_STEER, allow_inf_nan=False)]


def _not_blank(v):
    # runs before the field's own checks (mode="before"), so a blank text is told it is blank rather
    # than that it does not match NOT_BLANK; other types are left to the field's type check
    if isinstance(v, str) and v and not v.strip():
        raise ValueError("must not be empty or blank")
    return v


# metadata filters (index/metadata.py): a field name as the index accepts it (ASCII spelled out: "\w" differs
# between regex flavours), a scalar value, {"in": [values]} or {"word": "text"}. The name's pattern goes
# into the schema's propertyNames by hand: pydantic writes a constrained key as patternProperties, which
# lets any other key through in JSON Schema (schemathesis sent {">": ...} as schema-valid)
FIELD_NAME = r"^[A-Za-z_][A-Za-z0-9_-]*$"
FilterField = Annotated[str, Field(max_length=64)]


def _field_names(schema: dict) -> None:
    schema["propertyNames"] = {"maxLength": 64, "pattern": FIELD_NAME}


def _check_field_names(v):
    if isinstance(v, dict):
        bad = [k for k in v if isinstance(k, str) and not re.fullmatch(FIELD_NAME, k)]
        if bad:
            raise ValueError(f"field name {bad[0][:64]!r} must be letters, digits, _ or - (starting with a letter or _)")
    return v


Scalar = Annotated[str, Field(max_length=MAX_TEXT)] | bool | int | Annotated[float, Field(allow_inf_nan=False)]


class InClause(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    in_: list[Scalar] = Field(alias="in", min_length=1, max_length=MAX_TOKENS, description="any of these values")


class WordClause(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    word: str = Field(min_length=1, max_length=100, description="one word the field's text must hold (case-insensitive)")


class SearchRequest(BaseModel):
    # strict: the types the schema states and no others (lax mode took "k": "10", "k": true and
    # "steer": {"red": true}); an integer is still a valid number
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"text": "a red heart", "k": 10, "must": [], "must_not": ["cat"], "where": "heart OR star",
         "steer": {"red": 2.0}}]})

    text: str = Field(min_length=1, max_length=MAX_TEXT, pattern=NOT_BLANK, description="the query text")
    k: Count = Field(10, ge=1, le=MAX_K, description="number of hits")
    must: list[str] = Field(default_factory=list, max_length=MAX_TOKENS,
                            description="tokens every hit must contain")
    must_not: list[str] = Field(default_factory=list, max_length=MAX_TOKENS,
                                description="tokens no hit may contain")
    where: str | None = Field(None, max_length=MAX_TEXT,
                              description="boolean filter over tokens, e.g. `dog AND (beach OR sand) NOT cat`")
    steer: dict[str, Factor] = Field(default_factory=dict, max_length=MAX_TOKENS,
                                    description="token -> factor: 0 removes, <1 suppresses, >1 boosts; "
                                                "absent tokens are added at factor x the top query weight")
    fusion: Literal["rrf", "weighted"] | None = Field(
        None, description="hybrid search: fuse the hits with the server's dense index (`serve --dense-index`) by "
                          "reciprocal rank (rrf) or min-max normalised scores (weighted); null: the sparse index alone. "
                          "Not with must / must_not / where / filter (a dense index has no tokens or metadata)")
    weight: float = Field(0.5, ge=0, le=1, allow_inf_nan=False,
                          description="fusion: the sparse index's share of the fused score (the dense one's is 1 - weight)")
    filter: dict[FilterField, Scalar | InClause | WordClause] = Field(
        default_factory=dict, max_length=MAX_TOKENS, json_schema_extra=_field_names,
        description='filter on the rows\' metadata (source, caption, fields given at build time), all must hold: '
                    '{"source": "emoji-noto"} equality, {"source": {"in": ["a", "b"]}} any of them, '
                    '{"caption": {"word": "heart"}} the text holds the word; `where` / `must` filter on tokens')

    # ranking (explain/ranking.py): null keeps the server's (the index's, chosen when it was built)
    idf: float | None = Field(None, ge=0, le=4, allow_inf_nan=False,
                              description="query weights x BM25 idf ** idf over the indexed images (0 off)")
    prior_weight: float | None = Field(None, ge=0, le=100, allow_inf_nan=False,
                                       description="subtract prior_weight x each image's hubness (the index's hub "
                                                   "prior; 0 off)")
    expansion: float | None = Field(None, ge=0, le=10, allow_inf_nan=False,
                                    description="weight of the tokens the text encoder adds, against the query's "
                                                "own words")
    expansion_floor: float | None = Field(None, ge=0, le=1, allow_inf_nan=False,
                                          description="drop added tokens below this fraction of the query's top "
                                                      "weight (its own words always stay)")

    _text = field_validator("text", mode="before")(_not_blank)
    _filter = field_validator("filter", mode="before")(_check_field_names)

    def meta_filter(self) -> dict:
        """``filter`` as the index's filter object (metadata.MetaFilter.resolve reads it)."""
        return {k: v.model_dump(by_alias=True) if isinstance(v, BaseModel) else v for k, v in self.filter.items()}

    def ranking(self) -> dict:
        """The fields that change how hits are scored, as SearchService.search_text's keywords."""
        return {f: getattr(self, f) for f in ("idf", "prior_weight", "expansion", "expansion_floor")
                if getattr(self, f) is not None}


class HeatmapRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str = Field(min_length=1, max_length=1000, description="an indexed image id")
    text: str = Field(min_length=1, max_length=MAX_TEXT, pattern=NOT_BLANK,
                      description="the query whose tokens to localise")

    _text = field_validator("text", mode="before")(_not_blank)


class TokenWeight(BaseModel):
    token: str
    weight: float


class TokenContribution(BaseModel):
    token: str
    query_weight: float
    doc_weight: float
    contribution: float = Field(description="query_weight x doc_weight; a hit's contributions sum to its score")


class SearchHit(BaseModel):
    id: str
    score: float
    image_url: str | None
    text: str | None
    label: str | None
    tokens: list[TokenContribution]
    hub_penalty: float = Field(0.0, description="the hub prior's part: score = sum of contributions - hub_penalty")


class SearchResponse(BaseModel):
    query: list[TokenWeight] = Field(description="the (steered) query vector the index searched with")
    hits: list[SearchHit]
    took_ms: float
    notes: list[str] = Field(default_factory=list, description="how the query text was read, when it matters: "
                             "cut to the text encoder's length, or no word that names anything (then no hits)")


class ExplainResponse(BaseModel):
    id: str
    text: str | None
    label: str | None
    nnz: int
    tokens: list[TokenWeight]


class StatsResponse(BaseModel):
    model: str
    family: str
    vocab: str
    dim: int
    size: int = Field(description="indexed images")
    nnz: int = Field(description="stored (image, token) weights")
    collection: int = Field(description="ids with metadata (image file, text)")
    index: dict = Field(description="the engine's own statistics")
    dense_index: dict | None = Field(None, description="the dense index's statistics when hybrid search (fusion) is on")
    ranking: dict = Field(default_factory=dict, description="the default ranking of a search (each request may change it)")


class Health(BaseModel):
    status: str


class Error(BaseModel):
    detail: str
