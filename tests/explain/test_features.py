"""Feature naming on a tiny planted example: known words and images activate known features."""
import math

import numpy as np
import pytest

from tokenspace.explain.features import (
    FeatureTable,
    TopActivations,
    caption_agreement,
    common_words,
    concept_vocabulary,
    name_features,
    wordnet_lemmas,
)
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

WORDS = ["dog", "puppy", "cat", "kitten", "car", "tree"]
IMAGES = ["i0", "i1", "i2", "i3", "i4"]
CAPTIONS = ["a dog on grass", "two dogs", "a cat", "a sleepy kitten", "a red car"]


def planted():
    """4 features: f0 = dog (words + images agree), f1 = cat (agree), f2 = text says car but the
    images are dogs (disagree), f3 = dead."""
    vocab = Vocabulary.latent(4)
    w = np.zeros((len(WORDS), 4), np.float32)
    w[0, 0], w[1, 0] = 2.0, 1.5  # dog, puppy -> f0
    w[2, 1], w[3, 1] = 1.8, 1.0  # cat, kitten -> f1
    w[4, 2] = 3.0  # car -> f2
    im = np.zeros((len(IMAGES), 4), np.float32)
    im[0, 0], im[1, 0] = 1.0, 0.7  # dog images -> f0
    im[2, 1], im[3, 1] = 0.9, 0.8  # cat images -> f1
    im[0, 2], im[1, 2] = 0.5, 0.4  # f2 fires on the dog images, not the car
    return SparseBatch.from_dense(w, vocab), SparseBatch.from_dense(im, vocab)


def test_planted_features_are_named_and_judged():
    words, images = planted()
    table = name_features(words, WORDS, images, IMAGES, CAPTIONS, top_k=3, agreement_k=2)
    assert [f.feature for f in table.features] == ["f00000", "f00001", "f00002"]  # f3 is dead: left out
    dog, cat, car = table["f00000"], table["f00001"], table[2]
    assert dog.name == "dog" and [w for w, _ in dog.words] == ["dog", "puppy"]
    assert [i for i, _ in dog.images] == ["i0", "i1"] and dog.image_texts == ["a dog on grass", "two dogs"]
    assert dog.agreement == 1.0 and dog.multimodal
    assert cat.name == "cat" and cat.multimodal
    assert car.name == "car" and car.agreement == 0.0 and not car.multimodal
    assert table.names() == {"f00000": "dog", "f00001": "cat", "f00002": "car"}
    assert dog.label == "f00000 (dog)"
    with pytest.raises(KeyError):
        table["f00003"]


def test_without_captions_the_modality_band_decides():
    words, images = planted()
    table = name_features(words, WORDS, images, IMAGES, top_k=3)
    for f in table.features:
        assert f.agreement is None
        assert 0.0 <= f.modality <= 1.0
    # an image-only feature is not multimodal
    only_images = SparseBatch.from_dense(np.array([[0, 1.0], [0, 2.0]], np.float32))
    no_words = SparseBatch.from_dense(np.array([[1.0, 0.0]], np.float32))
    t = name_features(no_words, ["x"], only_images, ["a", "b"])
    assert not t[1].multimodal and t[1].name == "" and math.isclose(t[1].modality, 1.0)


def test_table_round_trips_and_renders(tmp_path):
    words, images = planted()
    table = name_features(words, WORDS, images, IMAGES, CAPTIONS, top_k=3, agreement_k=2)
    js, md = table.save(tmp_path)
    back = FeatureTable.load(js)
    assert back.names() == table.names() and back["f00000"].words == table["f00000"].words
    text = md.read_text()
    assert "| f00000 | dog | dog, puppy |" in text and "yes" in text
    assert table.summary()["multimodal_frac"] == pytest.approx(2 / 3)


def test_caption_agreement_matches_whole_words_and_plurals():
    assert caption_agreement(["dog"], ["two dogs", "a hotdog"]) == 0.5
    assert caption_agreement(["hot dog"], ["a hot dog stand"]) == 1.0


def test_word_lists(tmp_path):
    (tmp_path / "data.noun").write_text("  licence header line\n"
                                        "00001740 03 n 02 hot_dog 0 frank 0 000 | a sausage\n"
                                        "00001741 03 n 01 Dog 0 000 | an animal\n")
    (tmp_path / "data.adj").write_text("00002 00 a 01 tall(a) 0 000 | high\n")
    for name in ("data.verb", "data.adv"):
        (tmp_path / name).write_text("")
    assert wordnet_lemmas(tmp_path) == ["hot dog", "dog", "tall"]
    vocab = Vocabulary(["[PAD]", "[UNK]", "a", "the", "##s", "dog", "x2", "café", "cat"])
    assert common_words(vocab, limit=3) == ["the", "dog", "cat"]
    assert concept_vocabulary(common_words(vocab), tmp_path) == ["the", "dog", "cat", "hot dog", "tall"]
    assert concept_vocabulary(["dog", "cat"], wordnet=False) == ["dog", "cat"]
    with pytest.raises(FileNotFoundError):  # no silent fallback to a smaller list
        concept_vocabulary(["dog"], tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        wordnet_lemmas(tmp_path / "missing")


def test_names_a_tiny_sparse_clip_model(make_model):
    import torch

    from tokenspace.explain.features import name_model_features

    m = make_model("sparse-clip", expansion=4).eval()
    grids = torch.randn(6, 16, 2, 2).numpy()
    table = name_model_features(m, ["dog", "cat", "red car"], grids, [f"i{i}" for i in range(6)],
                                ["a dog"] * 6, top_k=2)
    assert all(f.feature.startswith("f") and len(f.feature) == 6 for f in table.features)
    assert len(table) > 0


def test_frequent_words_are_wordfreq_words_with_letters():
    pytest.importorskip("wordfreq")
    from tokenspace.explain.features import frequent_words

    w = frequent_words(2000)
    assert w[:3] == ["the", "to", "and"] and "dog" in w
    assert all(any(c.isalpha() for c in x) for x in w) and len(w) < 2000  # digits/symbols dropped
    v = concept_vocabulary(common_limit=2000, wordnet=False)
    assert v == w


def test_top_activations_streamed_match_a_full_sort():
    rng = np.random.default_rng(0)
    acts = np.where(rng.random((300, 7)) < 0.3, rng.integers(0, 5, (300, 7)).astype(np.float32), 0)  # ties
    top = TopActivations(7, k=4)
    for s in range(0, 300, 37):  # uneven blocks
        top.add(acts[s : s + 37])
    for f in range(7):
        order = sorted((r for r in range(300) if acts[r, f] > 0), key=lambda r: (-acts[r, f], r))[:4]
        rows, vals = top.top(f)
        assert rows.tolist() == order and vals.tolist() == acts[order, f].tolist()
    unit = acts / np.maximum(np.linalg.norm(acts, axis=1, keepdims=True), 1e-12)
    assert np.allclose(top.mean_mass(), unit.mean(0))


class _PlantedModel:
    """A stand-in encoder with known raw activations: "big" fires 3.0 on all three features, "pure"
    2.0 on f0 only. Raw, "big" leads f0; after L2 normalisation "pure" (1.0) would beat it (0.58)."""

    RAW = {"big": [3.0, 3.0, 3.0], "pure": [2.0, 0.0, 0.0], "none": [0.0, 0.0, 0.5]}

    def __init__(self):
        from tokenspace.vocab import Vocabulary

        self.vocab = Vocabulary.latent(3)

    def eval(self):
        return self

    def tokenize(self, texts):
        import torch

        return torch.tensor([list(self.RAW).index(t) for t in texts]), None

    def text_embed(self, ids, mask):
        import torch

        return torch.tensor([self.RAW[list(self.RAW)[i]] for i in ids.tolist()])

    def image_embed(self, grids):
        return grids.flatten(1)  # the "grid" is the activation row itself


def test_model_features_are_ranked_by_raw_activations():
    from tokenspace.explain.features import name_model_features

    grids = np.array([[4.0, 4.0, 4.0], [1.0, 0.0, 0.0]], np.float32)[:, :, None, None]
    table = name_model_features(_PlantedModel(), ["pure", "big", "none"], grids, ["wide", "narrow"], top_k=3)
    assert table["f00000"].words == [("big", 3.0), ("pure", 2.0)]  # raw order and raw values (Fig. 9)
    assert table["f00000"].images == [("wide", 4.0), ("narrow", 1.0)]
    assert table["f00000"].name == "big" and table.meta["activations"] == "raw"


def test_model_feature_values_are_the_raw_text_embed(make_model):
    import torch

    from tokenspace.explain.features import name_model_features

    m = make_model("sparse-clip", expansion=4).eval()
    words = ["dog", "cat", "red car", "a big house"]
    grids = torch.randn(5, 16, 2, 2).numpy()
    table = name_model_features(m, words, grids, [f"i{i}" for i in range(5)], top_k=4)
    with torch.no_grad():
        raw = m.text_embed(*m.tokenize(words)).numpy()  # slow reference: one batch, no streaming
    for f in table.features:
        for w, v in f.words:
            assert v == pytest.approx(float(raw[words.index(w), f.index]), rel=1e-5)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)  # raw rows are not unit vectors
