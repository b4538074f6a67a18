"""ImageNet classes -> words -> vocabulary tokens: the text side of the backbone's own classifier.

Each of the 1,000 ImageNet classes is a WordNet noun synset (``n02123045`` = tabby, tabby cat). Its
words are the synset's lemmas and, ``levels`` steps up, those of its hypernyms (tabby -> domestic cat,
house cat -> cat; domestic animal -> ...). The class -> token table maps each class to the WordPiece
tokens of those words, weighted ``decay ** level`` (a token reached at several levels keeps its
nearest one). Used by the ``tagger`` family and by VisualSparta's label fragments.

WordNet is read straight from the Debian ``wordnet-base`` data files (``data.noun``, the format of
wndb(5)): only lemmas and hypernym pointers are needed, so no WordNet library is required.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

SYNSETS_FILE = "imagenet_synsets.txt"  # one wnid per line, in classifier order
LEMMAS_FILE = "imagenet_synset_to_lemma.txt"  # wnid<TAB>lemma, lemma, ...
HYPERNYM_POINTERS = ("@", "@i")  # hypernym and instance hypernym (wndb(5))
# function words and pieces that name nothing ("man-of-war", "jack-o'-lantern"): never emitted
STOP_TOKENS = frozenset("a an and the of or in on at to for with by from as is s".split())


def read_wnids(folder: str | Path) -> list[str]:
    """The class order of the ImageNet-1k classifier: 1,000 wnids."""
    wnids = Path(folder, SYNSETS_FILE).read_text().split()
    if len(wnids) != len(set(wnids)) or not all(w.startswith("n") and len(w) == 9 for w in wnids):
        raise ValueError(f"{folder}/{SYNSETS_FILE} is not a list of distinct noun wnids")
    return wnids


def read_lemma_file(folder: str | Path) -> dict[str, list[str]]:
    """wnid -> lemmas from the lemma list shipped beside the wnids (level 0 without WordNet)."""
    out = {}
    for line in Path(folder, LEMMAS_FILE).read_text().splitlines():
        wnid, _, words = line.partition("\t")
        out[wnid] = [w.strip() for w in words.split(",") if w.strip()]
    return out


class NounGraph:
    """WordNet noun synsets: lemmas and hypernyms by wnid, parsed from a ``data.noun`` file."""

    def __init__(self, lemmas: dict[str, list[str]], hypernyms: dict[str, list[str]]):
        self.lemmas = lemmas
        self.hypernyms = hypernyms

    @classmethod
    def from_dict_dir(cls, folder: str | Path) -> "NounGraph":
        lemmas, hyper = {}, {}
        with open(Path(folder, "data.noun"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  "):  # the licence header
                    continue
                fields = line.split(" | ", 1)[0].split()
                wnid = "n" + fields[0]
                n_words = int(fields[3], 16)
                words = fields[4:4 + 2 * n_words:2]
                p = 4 + 2 * n_words
                n_ptr = int(fields[p])
                ptrs = [fields[p + 1 + 4 * i:p + 5 + 4 * i] for i in range(n_ptr)]
                lemmas[wnid] = [w.replace("_", " ") for w in words]
                hyper[wnid] = ["n" + off for sym, off, pos, _ in ptrs if sym in HYPERNYM_POINTERS and pos == "n"]
        return cls(lemmas, hyper)

    def words(self, wnid: str, levels: int) -> dict[str, int]:
        """word -> the fewest hypernym steps from ``wnid`` at which it is a lemma (0 = the synset's own)."""
        if wnid not in self.lemmas:
            raise KeyError(f"synset {wnid} is not in WordNet's nouns")
        out: dict[str, int] = {}
        frontier, seen = [wnid], {wnid}
        for level in range(levels + 1):
            nxt = []
            for s in frontier:
                for w in self.lemmas.get(s, ()):
                    out.setdefault(w, level)
                for h in self.hypernyms.get(s, ()):
                    if h not in seen:
                        seen.add(h)
                        nxt.append(h)
            frontier = nxt
        return out


def class_words(wnids: Sequence[str], levels: int, graph: NounGraph | None = None,
                lemma_file: dict[str, list[str]] | None = None) -> list[dict[str, int]]:
    """Per class: word -> level. ``levels > 0`` needs the WordNet graph; level 0 can come from either."""
    if graph is not None:
        return [graph.words(w, levels) for w in wnids]
    if levels > 0:
        raise ValueError("hypernym levels > 0 need WordNet: tokenspace assets install wordnet")
    if lemma_file is None:
        raise ValueError("class_words needs WordNet or the ImageNet lemma file")
    missing = [w for w in wnids if w not in lemma_file]
    if missing:
        raise KeyError(f"no lemmas for {missing[:5]}")
    return [{w: 0 for w in lemma_file[wnid]} for wnid in wnids]


def emitted(token: str) -> bool:
    """Tokens a class may carry: word pieces with a letter or digit, not function words or specials."""
    core = token[2:] if token.startswith("##") else token  # a piece "##by" is not the word "by"
    return any(ch.isalnum() for ch in core) and token not in STOP_TOKENS and not token.startswith("[")


@functools.lru_cache(maxsize=8)
def emitted_mask(tokens: tuple[str, ...]) -> np.ndarray:
    """``emitted`` of every token of a vocabulary, as a bool array (read-only). Cached: a fused model and
    its tagger part ask for the same 30,522 tokens, each at every load of the model."""
    mask = np.fromiter((emitted(t) for t in tokens), dtype=bool, count=len(tokens))
    mask.flags.writeable = False
    return mask




def word_groups(tokens: Sequence[str], ids: Sequence[int]) -> list[list[tuple[str, int]]]:
    """A text's word pieces grouped by word: a piece without ``##`` starts a word, ``##`` pieces continue
    it. A group of one piece is a word the vocabulary holds whole; a longer group is a word it only has
    as fragments (``Cypriniformes`` -> cy ##pr ##ini ##form ##es)."""
    groups: list[list[tuple[str, int]]] = []
    for tok, tid in zip(tokens, ids):
        if tok.startswith("##") and groups:
            groups[-1].append((tok, tid))
        else:
            groups.append([(tok, tid)])
    return groups


def token_table(words: Sequence[dict[str, int]], tokenizer, decay: float = 1.0, name_pieces: float = 1.0,
                hypernym_pieces: float = 1.0, specificity: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Classes' words -> (token_ids [U], weights [classes, U]) over the tokens any class uses.

    weights[c, u] = decay ** (the lowest level of a word of class c that gives token u), then:
    - a word the vocabulary holds only as pieces gives its pieces times ``name_pieces`` when it is one
      of the class's own names (level 0: a query for "tench" is tokenized into the same pieces, ten
      ##ch) and times ``hypernym_pieces`` when it comes from a hypernym (0 drops them). 1 and 1 is the
      first tagger's rule: "tench" rows carried ``cy, ##pr, ##ini, ##form`` from Cypriniformes at full
      weight, and such pieces matched hundreds of unrelated classes. A word held whole keeps its weight.
    - ``specificity`` s: each token's weight times (log(N / df) / log(N)) ** s, df = the number of the N
      classes holding it. A word or piece shared by hundreds of classes ("animal", ``##d``) says little
      about which one is in the picture; a class's own name (df = 1) keeps its full weight. 0: off.
    ``tokenizer`` is a WordPieceTokenizer (``tokenize`` / ``token_ids`` without specials)."""
    if not 0 < decay <= 1:
        raise ValueError(f"hypernym decay must be in (0, 1], not {decay}")
    if not (0 <= name_pieces <= 1 and 0 <= hypernym_pieces <= 1) or specificity < 0:
        raise ValueError(f"name_pieces and hypernym_pieces must be in [0, 1] and specificity >= 0, not "
                         f"{name_pieces}, {hypernym_pieces}, {specificity}")
    per_class: list[dict[int, float]] = []
    for ws in words:
        best: dict[int, float] = {}
        for word, level in ws.items():
            for group in word_groups(tokenizer.tokenize(word), tokenizer.token_ids(word)):
                w = decay ** level
                if len(group) > 1:
                    w *= name_pieces if level == 0 else hypernym_pieces
                for tok, tid in group:
                    if emitted(tok) and w > 0:
                        best[tid] = max(best.get(tid, 0.0), w)
        per_class.append(best)
    token_ids = np.array(sorted({t for b in per_class for t in b}), dtype=np.int64)
    col = {t: j for j, t in enumerate(token_ids)}
    table = np.zeros((len(words), len(token_ids)), np.float32)
    for c, best in enumerate(per_class):
        for t, w in best.items():
            table[c, col[t]] = w
    if specificity and len(words) > 1:
        df = (table > 0).sum(axis=0)
        table *= (np.log(len(words) / np.maximum(df, 1)) / np.log(len(words))).astype(np.float32) ** specificity
        used = table.any(axis=0)  # a token every class holds weighs 0 now: not a column
        token_ids, table = token_ids[used], np.ascontiguousarray(table[:, used])
    return token_ids, table
