"""The demo's search report: relevance by key word, found / MISSED per query, the summary counts and the
sample photos' self-retrieval line, on a tiny model and index built in code."""
import pytest

from tokenspace import demo
from tokenspace.data.manifest import Record
from tokenspace.explain.ranking import Ranking
from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch


@pytest.mark.parametrize("caption, key, want", [
    ("racing car — car, racing", "car", True), ("credit card — bank", "car", False),
    ("crying face — sad, tears", "tear", True), ("old coins on a table", "coin", True), (None, "car", False),
])
def test_relevant_is_a_whole_word_match(caption, key, want):
    assert demo.relevant(caption, key) is want


class BagModel:
    """Encodes a text or caption as the bag of its words: enough to make searches find what they name."""

    def __init__(self, vocab):
        self.vocab = vocab

    def encode_text(self, texts):
        rows = [{self.vocab.id(w): 1.0 for w in t.lower().split() if w in self.vocab} for t in texts]
        return SparseBatch.from_dicts(rows, dim=len(self.vocab), vocab=self.vocab)

    def decode(self, batch, top_k=20):
        return self.vocab.decode(batch, top_k=top_k)


def test_searches_report_found_missed_and_the_photo_line(tiny_vocab, monkeypatch, capsys):
    model = BagModel(tiny_vocab)
    monkeypatch.setattr(demo, "QUERIES", [("a red heart", "heart"), ("the sun", "sun"), ("a blue fish", "fish")])
    records = [Record(id="d1", image="", split="test", text="red heart", source="emoji"),
               Record(id="d2", image="", split="test", text="blue moon", source="emoji"),
               Record(id="p1", image="", split="test", text="a blue fish", source="skimage"),
               Record(id="p2", image="", split="test", text="a green tree", source="skimage")]
    vectors = model.encode_text([r.text for r in records])
    index = InvertedIndex.build(vectors, [r.id for r in records])
    meta = {r.id: {"text": r.text} for r in records}
    plain = Ranking(prior_weight=0.0)
    assert demo.print_searches(model, index, meta, plain) == {"at1": 2, "top_k": 2, "generic": 0, "contributions": 9}
    assert demo.print_photo_self_retrieval(model, index, records, plain) == 2
    out = capsys.readouterr().out
    assert "found: 1 indexed images have 'heart'" in out
    assert "MISSED: 0 indexed images have 'sun' in their caption; none scored above 0" in out
    assert "example searches (the model's own dot product): a relevant image at rank 1 for 2 of 3, in the top 3 for 2" in out
    assert "finds it at rank 1 for 2 of 2 (among all 4 indexed images)" in out
    # 'a' and 'blue' are in 2 of the 4 images (not more than half): no generic token among the hits' top 3
    assert "generic tokens (in > half of the images) in 0 of the hits' 9 top-3 contributions" in out


def test_searches_count_generic_tokens_and_show_the_ranking(tiny_vocab, monkeypatch, capsys):
    model = BagModel(tiny_vocab)
    monkeypatch.setattr(demo, "QUERIES", [("a red sun", "sun")])
    texts = ["a red sun", "a red moon", "a red star", "a blue sun"]
    records = [Record(id=f"d{i}", image="", split="test", text=t, source="emoji") for i, t in enumerate(texts)]
    index = InvertedIndex.build(model.encode_text(texts), [r.id for r in records])
    index.set_hub_prior(model.encode_text(["a red moon", "a red star"]), k=1, weight=0.5)
    meta = {r.id: {"text": r.text} for r in records}
    # a Ranking is resolved: its prior weight is the one searched with (0 would be off)
    assert demo.print_searches(model, index, meta, Ranking(idf=1.0, prior_weight=0.5))["at1"] == 1
    out = capsys.readouterr().out
    # 'a' is in every image and 'red' in 3 of 4: both generic; the hits' top-3 contributions hold them
    assert "example searches (idf^1, hub prior x0.5): a relevant image at rank 1 for 1 of 1" in out
    assert "generic tokens (in > half of the images) in 5 of the hits' 7 top-3 contributions" in out
    assert "hub penalty -" in out
