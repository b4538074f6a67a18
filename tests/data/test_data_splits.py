"""Concept-group splits: a held-out concept never reaches training, through any chain of shared keys."""
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenspace.data.manifest import Record
from tokenspace.data.splits import (
    Candidate,
    ConceptGroups,
    assign,
    bucket,
    caption_key,
    group_split,
    holdout_set,
    leaks,
)

KEYS = [f"k{i}" for i in range(12)]
ROLES = {"core": ("train", "val", "test"), "extra": ("train-extra", None, None),
         "test-artist": ("test-artists", None, "test")}


def _components(items):
    """Reference: connected components by breadth-first search over shared keys (slow, obvious)."""
    by_key = defaultdict(list)
    for i, keys in enumerate(items):
        for k in keys:
            by_key[k].append(i)
    comp, n = {}, 0
    for start in range(len(items)):
        if start in comp:
            continue
        stack = [start]
        comp[start] = n
        while stack:
            i = stack.pop()
            for k in items[i]:
                for j in by_key[k]:
                    if j not in comp:
                        comp[j] = n
                        stack.append(j)
        n += 1
    return comp


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(st.tuples(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
                             st.sampled_from(sorted(ROLES))), min_size=1, max_size=40),
    seed=st.integers(0, 5),
    test=st.floats(0.0, 0.6),
    val=st.floats(0.0, 0.4),
)
def test_concept_groups_never_leak(items, seed, test, val):
    cands = [Candidate(Record(f"id{i}", "x.png", "t", "", source=role), tuple(keys), ROLES[role])
             for i, (keys, role) in enumerate(items)]
    records, dropped, split_of = assign(cands, {"test": test, "val": val}, seed)
    assert len(records) + sum(dropped.values()) == len(cands)
    split = {r.id: r.split for r in records}
    comp = _components([keys for keys, _ in items])
    # every member of a connected component gets its split from one group decision
    decided = defaultdict(set)
    for i, (keys, role) in enumerate(items):
        if f"id{i}" in split:
            gs = ("train", "val", "test")[ROLES[role].index(split[f"id{i}"])] if role == "core" else None
            if gs:
                decided[comp[i]].add(gs)
    assert all(len(s) == 1 for s in decided.values())
    # no component has a training record and a held-out-concept record
    sides = defaultdict(set)
    for i in range(len(items)):
        s = split.get(f"id{i}")
        if s in ("train", "train-extra"):
            sides[comp[i]].add("train")
        elif s in ("val", "test"):
            sides[comp[i]].add("heldout")
    assert all(len(s) == 1 for s in sides.values())
    assert not leaks([(r.split, cands[int(r.id[2:])].keys) for r in records], ("val", "test"))


def test_leaks_detects_a_leak_through_a_chain():
    # a-b share k1, b-c share k2: a in train and c in test is a leak, although they share no key
    pairs = [("train", ("k0", "k1")), ("train-extra", ("k1", "k2")), ("test", ("k2", "k3")), ("test", ("k9",))]
    assert leaks(pairs, ("test",)) == {"k0"}
    assert not leaks(pairs[:2] + pairs[3:], ("test",))


def test_union_find_names_groups_by_smallest_key():
    g = ConceptGroups()
    g.add(["z", "m"])
    g.add(["m", "b"])
    g.add(["q"])
    assert g.group(["z"]) == g.group(["b"]) == "b" and g.group(["q"]) == "q"
    assert sorted(g.sizes().values()) == [1, 3]


def test_group_split_fractions_are_close():
    splits = [group_split(f"g{i}", {"test": 0.2, "val": 0.1}, seed=3) for i in range(5000)]
    assert abs(splits.count("test") / 5000 - 0.2) < 0.03 and abs(splits.count("val") / 5000 - 0.1) < 0.03


def test_unique_keeps_one_image_per_heldout_caption():
    cands = [Candidate(Record(f"{s}:heart", "x.png", "heart", "", source=s), ("cap:heart",), ("train", "val", "test"),
                       unique="heart") for s in ("mdi", "tabler", "lucide")]
    seed = next(s for s in range(100) if group_split("cap:heart", {"test": 0.5}, s) == "test")
    records, dropped, _ = assign(cands, {"test": 0.5}, seed)
    assert [r.id for r in records] == ["mdi:heart"] and dropped["test_duplicate_caption"] == 2
    seed = next(s for s in range(100) if group_split("cap:heart", {"test": 0.5}, s) == "train")
    records, _, _ = assign(cands, {"test": 0.5}, seed)
    assert len(records) == 3  # training keeps every drawing


@pytest.mark.parametrize("a,b", [
    ("Woman Golfing: dark skin tone", "person golfing"),
    ("red hearts", "the red-heart"),
    ("men holding hands", "people holding hands"),
    ("Heart", "heart"),
])
def test_caption_key_groups_near_duplicates(a, b):
    assert caption_key(a) == caption_key(b) != ""


def test_caption_key_keeps_distinct_concepts_apart():
    assert caption_key("dog") != caption_key("hot dog")
    assert caption_key("man") == "man" and caption_key("woman") == "woman"  # nothing else to keep
    assert caption_key("traffic light") == "light traffic"  # "light" is only a tone after a ":"


def test_holdout_set_is_exact_and_stable():
    keys = [f"c{i}" for i in range(100)]
    held = holdout_set(keys, 0.2, seed=1)
    assert len(held) == 20 and held == holdout_set(reversed(keys), 0.2, seed=1)
    assert 0 <= bucket("x") < 1
