"""Zero-shot class names expanded through WordNet (eval/expand.py) and the evaluator's max over a class's
names (eval/zeroshot.py), on a tiny WordNet written in code and toy embeddings checked by hand."""
import numpy as np
import pytest

from tokenspace.eval.expand import Expander, wordnet_expansions
from tokenspace.eval.zeroshot import ZeroShotEvaluator, true_class_ranks
from tokenspace.models.classwords import NounGraph
from tokenspace.sparse import SparseBatch

# (offset, lemmas, hypernym offsets): a tiny clothing graph in WordNet's data.noun format (wndb(5))
SYNSETS = [
    ("00000001", ["garment"], []),
    ("00000002", ["footwear"], ["00000001"]),
    ("00000003", ["shoe"], ["00000002"]),
    ("00000004", ["sneaker", "gym_shoe"], ["00000003"]),
    ("00000005", ["running_shoe"], ["00000004"]),
    ("00000006", ["plimsoll"], ["00000004"]),
    ("00000007", ["trail_runner"], ["00000005"]),           # depth 2 under sneaker
    ("00000008", ["sandal"], ["00000003"]),
    ("00000009", ["flip-flop", "thong"], ["00000008"]),
    ("00000010", ["container"], []),
    ("00000011", ["bag"], ["00000010"]),                     # bag, sense 1: a container
    ("00000012", ["bag", "handbag"], ["00000011"]),          # bag, sense 2: under sense 1
    ("00000013", ["backpack", "rucksack"], ["00000011"]),
    ("00000014", ["clutch"], ["00000012"]),
    ("00000015", ["udder", "bag"], []),                      # bag, sense 3: an unrelated sense
    ("00000016", ["trouser", "pant"], ["00000018"]),
    ("00000017", ["jean", "denim"], ["00000016"]),
    ("00000018", ["apparel", "dress"], ["00000001"]),        # "dress" is also WordNet's apparel, above trousers
    ("00000019", ["frock", "dress"], ["00000018"]),
    ("00000020", ["boot"], ["00000003"]),                    # boot, sense 1: footwear
    ("00000021", ["blow"], []),
    ("00000022", ["boot", "kick"], ["00000021"]),            # boot, sense 2: a kick
    ("00000023", ["dropkick"], ["00000022"]),
]
IMAGENET = ["n00000005", "n00000013", "n00000017"]  # running shoe, backpack, jean


def data_noun_line(offset, lemmas, hypernyms):
    words = " ".join(f"{w} 0" for w in lemmas)
    ptrs = [("@", h) for h in hypernyms]
    p = " ".join(f"{sym} {off} n 0000" for sym, off in ptrs)
    return f"{offset} 06 n {len(lemmas):02x} {words} {len(ptrs):03d} {p} | a gloss\n"


@pytest.fixture
def graph(tmp_path):
    (tmp_path / "data.noun").write_text("  1 This software and database is being provided\n"
                                        + "".join(data_noun_line(*s) for s in SYNSETS))
    return NounGraph.from_dict_dir(tmp_path)


# ------------------------------------------------------------------------------------- expansion
def test_hyponyms_at_every_depth(graph):
    e = wordnet_expansions(["sneaker"], graph)
    assert e == {"sneaker": ["running shoe", "plimsoll", "trail runner"]}  # nearest first, then by wnid
    # a name's every sense: bag the container and bag the handbag (its own synset, not emitted as a
    # synonym), and their hyponyms; bag the udder has none
    assert wordnet_expansions(["bag"], graph) == {"bag": ["backpack", "rucksack", "clutch"]}


def test_synonyms_are_the_own_synsets_other_lemmas(graph):
    e = wordnet_expansions(["sneaker", "bag"], graph, hyponyms=False, synonyms=True)
    assert e == {"sneaker": ["gym shoe"], "bag": ["handbag", "udder"]}


def test_imagenet_restriction_keeps_only_those_hyponyms(graph):
    e = wordnet_expansions(["sneaker", "bag", "trouser"], graph, restrict_to=IMAGENET)
    assert e == {"sneaker": ["running shoe"], "bag": ["backpack", "rucksack"], "trouser": ["jean", "denim"]}


def test_hypernyms_one_level_and_a_shared_one_goes_to_no_class(graph):
    assert wordnet_expansions(["sneaker"], graph, hyponyms=False, hypernyms=True) == {"sneaker": ["shoe"]}
    # sneaker and sandal both sit one step under "shoe": a tie, so it names neither
    e = wordnet_expansions(["sneaker", "sandal"], graph, hyponyms=False, hypernyms=True)
    assert e == {"sneaker": [], "sandal": []}
    both = wordnet_expansions(["sandal"], graph, hypernyms=True)
    assert both == {"sandal": ["shoe", "flip-flop", "thong"]}  # the hypernym and hyponyms, both 1 step


def test_a_synset_goes_to_the_nearest_class(graph):
    # "dress" is also apparel, above trousers and jeans: alone, it takes them
    assert wordnet_expansions(["dress"], graph) == {"dress": ["trouser", "pant", "jean", "denim"]}
    # beside the class trouser, they go to it: trouser is its own sense (0 steps, apparel 1) and jean is
    # 1 step under trouser, 2 under apparel
    e = wordnet_expansions(["dress", "trouser"], graph)
    assert e == {"dress": [], "trouser": ["jean", "denim"]}
    assert wordnet_expansions(["dress", "trouser"], graph, synonyms=True) == \
        {"dress": ["apparel", "frock"], "trouser": ["pant", "jean", "denim"]}
    # a synset that is two classes' own sense (frock = dress) is neither's synonym
    assert wordnet_expansions(["dress", "frock"], graph, synonyms=True) == {"dress": ["apparel", "trouser", "pant",
                                                                                      "jean", "denim"],
                                                                           "frock": []}


def test_context_senses_are_those_nearest_the_other_class_names(graph):
    ex = Expander(graph)
    assert ex.senses("boot") == ["n00000020", "n00000022"]
    # beside "sandal", boot the shoe shares "shoe" (2 steps below the root) with it; boot the kick shares nothing
    assert ex.senses_in_context("boot", ["sandal"]) == ["n00000020"]
    # no other name, or none WordNet knows: every sense
    assert ex.senses_in_context("boot", []) == ex.senses_in_context("boot", ["ankle boot"]) == ex.senses("boot")
    every = dict(hyponyms=True, hypernyms=True, synonyms=True)
    assert wordnet_expansions(["boot", "sandal"], graph, **every)["boot"] == ["kick", "blow", "dropkick"]
    assert wordnet_expansions(["boot", "sandal"], graph, senses="context", **every)["boot"] == []
    with pytest.raises(ValueError, match="senses"):
        wordnet_expansions(["boot"], graph, senses="first")


def test_unknown_and_odd_names_expand_to_nothing(graph):
    e = wordnet_expansions(["ankle boot", "", "Sneaker", "gym_shoe"], graph, hypernyms=True, synonyms=True)
    assert e["ankle boot"] == [] and e[""] == []
    # case and underscores do not matter for the lookup; "Sneaker" and "gym_shoe" are one synset: a tie
    assert Expander(graph).senses("Sneaker") == Expander(graph).senses("gym shoe") == ["n00000004"]
    assert e["Sneaker"] == e["gym_shoe"] == []


# ------------------------------------------------------------------------------------- scoring
# toy text encoder over 5 dims: one word each; "photo" a shared context word
WORDS = {"cat": 0, "dog": 1, "tabby": 2, "puppy": 3, "photo": 4}


def encode(texts):
    return SparseBatch.from_dicts([{WORDS[w]: 1.0 for w in t.split() if w in WORDS} for t in texts], dim=5)


IMAGES = np.array([
    [1.0, 0.0, 0.0, 0.0, 0.0],   # a cat
    [0.0, 0.0, 1.0, 0.0, 0.0],   # a tabby: cat only through its expansion
    [0.0, 0.2, 0.0, 1.0, 0.0],   # a puppy
    [0.3, 0.0, 0.0, 0.9, 0.0],   # a puppy, a bit cat-like
    [0.5, 0.5, 0.0, 0.0, 0.0],   # a tie between cat and dog: wrong
], np.float32)
LABELS = [0, 0, 1, 1, 0]
TEMPLATES = ["{c}", "photo {c}"]


def reference_scores(expansions, metric):
    """Slow reference: per class and name, the mean of its normalised prompt vectors, scored by cosine
    (or dot) against each image; a class's score is the max over its names."""
    out = np.zeros((len(IMAGES), 2))
    for c, cls in enumerate(["cat", "dog"]):
        per_name = []
        for name in [cls, *expansions.get(cls, [])]:
            prompts = encode([t.format(c=name) for t in TEMPLATES]).to_dense()
            if metric == "cosine":
                prompts = prompts / np.linalg.norm(prompts, axis=1, keepdims=True)
            v = prompts.mean(axis=0)
            img = IMAGES
            if metric == "cosine":
                v = v / np.linalg.norm(v)
                img = IMAGES / np.linalg.norm(IMAGES, axis=1, keepdims=True)
            per_name.append(img @ v)
        out[:, c] = np.max(per_name, axis=0)
    return out


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_max_over_expansions_equals_a_hand_reference(metric):
    exp = {"cat": ["tabby"], "dog": ["puppy"]}
    ref = reference_scores(exp, metric)
    ref_ranks = np.array([(ref[i] >= ref[i, y]).sum() - 1 for i, y in enumerate(LABELS)])
    ev = ZeroShotEvaluator(["cat", "dog"], LABELS, templates=TEMPLATES, ks=(1, 2), metric=metric, expansions=exp)
    out = ev(IMAGES, encode)
    assert ev.names == ["cat", "tabby", "dog", "puppy"] and list(ev.groups) == [0, 2, 4]
    assert out["acc1"] == pytest.approx(np.mean(ref_ranks == 0))
    # by hand: right on the cat, the tabby (via "tabby") and both puppies; the 50/50 image is a tie
    assert out["acc1"] == pytest.approx(4 / 5)
    plain = ZeroShotEvaluator(["cat", "dog"], LABELS, templates=TEMPLATES, ks=(1,), metric=metric)(IMAGES, encode)
    assert plain["acc1"] == pytest.approx(2 / 5)  # the cat and the first puppy; the tabby scores 0 and 0


def test_grouped_ranks_take_the_max_over_a_class_rows():
    clf = np.eye(3, dtype=np.float32)                        # rows: class 0 = {0, 1}, class 1 = {2}
    img = np.array([[0.1, 0.9, 0.5], [0.6, 0.0, 0.7]], np.float32)
    assert list(true_class_ranks(img, clf, [0, 0], groups=[0, 2, 3])) == [0, 1]
    assert list(true_class_ranks(img, clf, [1, 1], groups=[0, 2, 3])) == [1, 0]
    with pytest.raises(ValueError, match="groups"):
        true_class_ranks(img, clf, [0, 0], groups=[0, 3, 3])


def test_no_or_empty_expansions_change_nothing():
    base = ZeroShotEvaluator(["cat", "dog"], LABELS, templates=TEMPLATES, metric="cosine")(IMAGES, encode)
    empty = ZeroShotEvaluator(["cat", "dog"], LABELS, templates=TEMPLATES, metric="cosine",
                              expansions={"cat": [], "dog": []})(IMAGES, encode)
    assert base == empty


def test_bad_expansions_are_rejected():
    with pytest.raises(ValueError, match="not classes"):
        ZeroShotEvaluator(["cat", "dog"], LABELS, expansions={"cow": ["calf"]})
    with pytest.raises(TypeError, match="list of names"):
        ZeroShotEvaluator(["cat", "dog"], LABELS, expansions={"cat": "tabby"})
