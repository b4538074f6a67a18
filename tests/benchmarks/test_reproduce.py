"""benchmarks/reproduce.py section builders on tiny in-code models and a tiny manifest (no assets)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from tokenspace.data.manifest import Record, write_manifest
from tokenspace.eval import ResultsDoc, RetrievalEvaluator


@pytest.fixture(scope="module")
def rp(load_benchmark):
    return load_benchmark("reproduce")


@pytest.fixture
def manifest(tmp_path, tiny_pairs):
    """Emoji-like records: text "CONCEPT — words", label = a category (the shape); three splits."""
    paths, texts = tiny_pairs
    records = []
    for split in ("train", "test", "val"):
        for p, t in zip(paths, texts):
            color, shape = t.split()[1:]
            records.append(Record(f"{split}:{color}-{shape}", str(p), f"{color} {shape} — a {color} {shape}",
                                  split, label=f"{shape}_things"))
    return write_manifest(records, tmp_path / "tiny.jsonl")


@pytest.fixture
def plan(rp, manifest):
    m = str(manifest)
    return rp.Plan(retrieval=[f"{m}:test", f"{m}:val"], flops=[f"{m}:test"], concept=[f"{m}:test"],
                   zeroshot={f"{m}:test": ("an emoji of {c}", "{c}")}, probe={f"{m}:test": f"{m}:train"},
                   textfree=[f"{m}:test"], localize=f"{m}:test", n_decode=3, n_heatmaps=2)


@pytest.fixture
def models(make_model):
    return {"stair-emoji": make_model("stair", seed=0), "stair-emoji-single": make_model("stair", seed=1),
            "dense-emoji": make_model("dense", seed=2), "stair-emoji-lambda1e-2": make_model("stair", seed=3),
            "stair-emoji-lambda1e-4": make_model("stair", seed=4)}


@pytest.fixture
def bench(rp, models, tmp_path):
    return rp.Bench(models, home=tmp_path / "home", provenance={r: "tiny" for r in models})


def _table_rows(body: str) -> list[str]:
    return [ln for ln in body.splitlines() if ln.startswith("| ") and not ln.startswith("| system")]


def test_helpers(rp):
    rec = Record("x", "x.png", "flag: Germany — flag, germany", "test", label="signs_and_symbols")
    assert rp.concept(rec) == "flag: Germany"
    assert rp.clean_classname(rp.concept(rec)) == "flag Germany"
    assert rp.clean_classname(rec.label) == "signs and symbols"
    classes, idx = rp.class_indices(["b", "a", "b"])
    assert classes == ["a", "b"] and idx.tolist() == [1, 0, 1]
    recs = [Record(f"id{i}", "p", t, "test") for i, t in enumerate(["cat — x", "dog — y", "sun — z", "moon — w"])]
    rows = rp.showcase_rows(recs, 3, prefer=("sun", "dog"))
    assert rows[:2] == [2, 1] and len(set(rows)) == 3  # preferred first, then fixed filler
    assert rows == rp.showcase_rows(recs, 3, prefer=("sun", "dog"))


def test_lambda_overrides_survive_repeated_use(rp):
    """Recipe.from_dict consumes the loss dict it gets; every use must still see λ = 1e-2."""
    for _ in range(2):
        assert "λ=0.01, 3 stage(s), 300 steps" in rp.describe("stair-emoji-lambda1e-2", quick=False)
    assert "λ=0.0001, 3 stage(s), 9 steps, batch 16" in rp.describe("stair-emoji-lambda1e-4", quick=True)


def test_retrieval_and_flops(rp, bench, plan, tmp_path):
    sec = rp.build_retrieval(bench, plan)
    # 3 models x 2 splits, then once the clip_benchmark tie rule for the 3 models on the first split
    assert len(sec.numbers) == 3 * 2 + 3 and len(_table_rows(sec.body)) == 6 + 3
    for r in ("STAIR 3-stage", "dense baseline"):
        strict, compat = sec.numbers[f"{r} · {plan.retrieval[0]}"], sec.numbers[f"clip_benchmark ties · {r} · {plan.retrieval[0]}"]
        assert all(strict[c] <= compat[c] for c in rp.R_COLS[:6])  # the default rule is never more lenient
    for key, row in sec.numbers.items():
        assert all(0 <= row[c] <= 1 for c in rp.R_COLS[:6]), key
        assert row["n_images"] == 12
    # the dense baseline's nnz is its width; STAIR's is counted from the sparse rows
    dense = sec.numbers[f"dense baseline · {plan.retrieval[0]}"]
    assert dense["nnz_image"] == bench.images("dense-emoji", plan.retrieval[0]).shape[1]
    stair = sec.numbers[f"STAIR 3-stage · {plan.retrieval[0]}"]
    assert stair["nnz_image"] == pytest.approx(bench.images("stair-emoji", plan.retrieval[0]).row_nnz().mean())

    doc = ResultsDoc(tmp_path / "out" / "results.md")
    sec = rp.build_flops(bench, plan, tmp_path / "out" / "img", doc)
    assert (tmp_path / "out" / "img" / "flops_ablation.png").stat().st_size > 0
    assert "](img/flops_ablation.png)" in sec.body
    assert sorted(r["lambda"] for r in sec.numbers.values()) == [1e-4, 1e-3, 1e-2]


def test_interpretability(rp, bench, plan):
    sec = rp.build_interpretability(bench, plan)
    spec = plan.concept[0]
    # the dense baseline is the CLIP arm: token score = cosine(image embedding, the token's text embedding)
    dense_row = sec.numbers[f"dense baseline · {spec}"]
    dm = bench.models["dense-emoji"]
    with torch.no_grad():
        ids = torch.tensor([[dm.tokenizer.vocab.id("[CLS]"), v, dm.tokenizer.vocab.id("[SEP]")]
                            for v in range(len(dm.tokenizer.vocab))])
        tok = dm.text_embed(ids, torch.ones_like(ids)).numpy()
    tok /= np.linalg.norm(tok, axis=1, keepdims=True)
    dimg = bench.images("dense-emoji", spec)
    sims = (dimg / np.linalg.norm(dimg, axis=1, keepdims=True)) @ tok.T
    special = dm.vocab.special_ids
    hits = []
    for i, rec in enumerate(bench.records(spec, "dense-emoji")):
        sub = [t for t in dm.tokenizer.token_ids(rp.concept(rec)) if t not in special]
        others = np.delete(sims[i], np.concatenate([special, sub]))
        hits.append((others >= sims[i, sub].max()).sum() < 5)
    assert dense_row["token_acc5"] == pytest.approx(np.mean(hits))
    assert np.isnan(dense_row["clarity"]) and "n/a" in sec.body  # Clarity needs named dimensions
    stair = sec.numbers[f"STAIR 3-stage · {spec}"]
    # by hand: rank of the best label sub-word among all non-special tokens of each image vector
    model, img = bench.models["stair-emoji"], bench.images("stair-emoji", spec)
    dense = img.to_dense()
    special = model.vocab.special_ids
    hits = []
    for i, rec in enumerate(bench.records(spec, "stair-emoji")):
        sub = [t for t in model.tokenizer.token_ids(rp.concept(rec)) if t not in special]
        s = dense[i, sub].max()
        others = np.delete(dense[i], np.concatenate([special, sub]))
        hits.append(s > 0 and (others >= s).sum() < 5)
    assert stair["token_acc5"] == pytest.approx(np.mean(hits))
    # the decode table: fixed images, one column per model, the dense one by cosine with token embeddings
    assert "| image | STAIR 3-stage | STAIR single-stage | dense baseline |" in sec.body
    assert len(sec.numbers["decode_ids"]) == plan.n_decode


def test_zeroshot_and_probe(rp, bench, plan):
    sec = rp.build_zeroshot(bench, plan)
    spec = next(iter(plan.zeroshot))
    row = sec.numbers[f"STAIR 3-stage · {spec}"]
    assert row["n_classes"] == 4  # dog/cat/car/tree things, underscores read as spaces
    assert set(row) >= {"acc1[an emoji of {c}]", "acc1[{c}]", "ensemble_acc1", "ensemble_mean_per_class_recall"}
    assert all(0 <= v <= 1 for k, v in row.items() if k != "n_classes")
    assert "“an emoji of {c}” acc1 (%)" in sec.body and "Linear probe" in sec.body
    probe = sec.numbers[f"probe · dense baseline · {spec}"]
    assert 0 <= probe["lp_acc1"] <= 1 and probe["lp_C"] > 0


def test_textfree_uses_token_masks(rp, bench, plan):
    sec = rp.build_textfree(bench, plan)
    spec = plan.textfree[0]
    assert not any("dense" in k for k in sec.numbers)  # STAIR_IMAGE needs token dimensions
    row = sec.numbers[f"STAIR 3-stage · token mask (STAIR_IMAGE) · {spec}"]
    # by hand: the query is 1 on each caption token, scored by cosine with the image (STAIR eq. 2)
    model, img = bench.models["stair-emoji"], bench.images("stair-emoji", spec)
    texts = [r.text for r in bench.records(spec, "stair-emoji")]
    mask = np.zeros((len(texts), len(model.vocab)), np.float32)
    for i, t in enumerate(texts):
        ids = [j for j in model.tokenizer.token_ids(t) if j not in model.vocab.special_ids]
        mask[i, ids] = 1.0
    expect = RetrievalEvaluator(np.arange(len(texts)), metric="cosine")(img.to_dense(), mask)
    for k in ("image_retrieval_recall@1", "text_retrieval_recall@1", "text_retrieval_recall@5"):
        assert row[k] == pytest.approx(expect[k]), k
    assert row["nnz_text"] == pytest.approx(mask.sum(1).mean())
    # Table 10's zero-shot arm: both query sides, STAIR models only
    zs = {k: v for k, v in sec.numbers.items() if k.startswith("zero-shot · ")}
    assert set(zs) == {f"zero-shot · {m} · {side} · {spec}" for m in ("STAIR 3-stage", "STAIR single-stage")
                       for side in ("text encoder", "token mask (STAIR_IMAGE)")}
    assert all(0 <= v["ensemble_acc1"] <= 1 for v in zs.values())
    assert "Zero-shot classification" in sec.body


def test_localization_pngs(rp, bench, plan, tmp_path):
    doc = ResultsDoc(tmp_path / "results.md")
    sec = rp.build_localization(bench, plan, tmp_path / "img", doc)
    pngs = sorted((tmp_path / "img").glob("localization_*.png"))
    assert len(pngs) == plan.n_heatmaps == len(sec.numbers)
    assert all(f"(img/{p.name})" in sec.body for p in pngs)
    model = bench.models["stair-emoji"]
    grid = bench.encoded(plan.localize, "stair-emoji").grids[0]
    cells = rp.cell_scores(model, grid)
    assert cells.shape == (*grid.shape[-2:], len(model.vocab))
    # max over cells then log(1+ReLU) is the image embedding itself (before L2 normalisation), whose
    # special-token dimensions are empty
    emb = np.log1p(np.maximum(cells.reshape(-1, cells.shape[-1]).max(0), 0))
    emb[model.vocab.special_ids] = 0
    got = bench.images("stair-emoji", plan.localize)[[0]].to_dense()[0]
    np.testing.assert_allclose(got, emb / np.linalg.norm(emb), atol=1e-5)


def test_main_writes_doc_and_json(rp, models, plan, tmp_path, monkeypatch):
    """main() wiring with training stubbed out: sections land in the doc and every number in the JSON."""
    monkeypatch.setattr(rp, "trained", lambda run, runs_dir, home, quick: models[run])
    monkeypatch.setattr(rp, "describe", lambda run, quick: f"tiny {run}")
    monkeypatch.setattr(rp, "QUICK", plan)
    results, js = tmp_path / "doc" / "results.md", tmp_path / "doc" / "numbers.json"
    argv = ["--quick", "--results", str(results), "--json", str(js), "--home", str(tmp_path / "home"),
            "--only", "retrieval", "text-free"]
    assert rp.main(argv) == 0
    doc = ResultsDoc(results)
    assert doc.sections() == ["retrieval", "text-free"]
    assert "python -m benchmarks.reproduce --quick" in doc.section("retrieval")
    assert "`stair-emoji` (tiny stair-emoji)" in doc.section("retrieval")
    numbers = json.loads(js.read_text())["sections"]
    assert set(numbers) == {"retrieval", "text-free"}
    r1 = numbers["retrieval"]["numbers"][f"STAIR 3-stage · {plan.retrieval[0]}"]["image_retrieval_recall@1"]
    assert re.search(rf"\| STAIR 3-stage · {re.escape(plan.retrieval[0])} \| {r1 * 100:.1f} \|", doc.section("retrieval"))
    # a second --only run keeps the other sections of both files
    assert rp.main(argv[:-2] + ["interpretability"]) == 0
    assert ResultsDoc(results).sections() == ["retrieval", "text-free", "interpretability"]
    assert set(json.loads(js.read_text())["sections"]) == {"retrieval", "text-free", "interpretability"}


def test_available_only_trains_nothing_and_leaves_out_missing_models(rp, models, plan, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    (runs / "stair-emoji" / "model").mkdir(parents=True)
    (runs / "stair-emoji" / "model" / "model.safetensors").write_bytes(b"")  # only this run is trained
    asked = []
    monkeypatch.setattr(rp, "trained", lambda run, runs_dir, home, quick: asked.append(run) or models[run])
    monkeypatch.setattr(rp, "describe", lambda run, quick: f"tiny {run}")
    monkeypatch.setattr(rp, "QUICK", plan)
    results = tmp_path / "doc" / "results.md"
    assert rp.main(["--quick", "--available-only", "--runs", str(runs), "--results", str(results),
                    "--home", str(tmp_path / "home"), "--only", "text-free"]) == 0
    assert asked == ["stair-emoji"]
    body = ResultsDoc(results).section("text-free")
    assert "STAIR 3-stage · token mask" in body and "single-stage" not in body
