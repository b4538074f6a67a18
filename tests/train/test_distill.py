"""Distillation into the student (SPLADE++ / D2S style, not STAIR): the loss term,
its gradient, the teacher's cached scores, the recipe keys and a tiny end-to-end run."""
import json

import numpy as np
import pytest
import torch

from tokenspace import pipeline
from tokenspace.data.manifest import Record, write_manifest
from tokenspace.train.distill import TeacherScores, load_teacher, teacher_scores
from tokenspace.train.losses import SparseContrastiveLoss, distillation_loss
from tokenspace.train.recipe import Recipe, Stage, parse_overrides
from tokenspace.train.trainer import PairData, Trainer


def central_difference(f, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """d f / d x by central differences, one entry at a time (float64)."""
    grad = torch.zeros_like(x)
    flat, g = x.view(-1), grad.view(-1)
    for i in range(flat.numel()):
        old = flat[i].item()
        flat[i] = old + eps
        up = f(x).item()
        flat[i] = old - eps
        down = f(x).item()
        flat[i] = old
        g[i] = (up - down) / (2 * eps)
    return grad


# ------------------------------------------------------------------------------------------ the loss
def test_gradient_wrt_the_student_logits_equals_finite_differences_and_the_closed_form():
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(5, 5, generator=gen, dtype=torch.float64) * 3
    t = torch.randn(5, 5, generator=gen, dtype=torch.float64) * 3
    x = s.clone().requires_grad_(True)
    distillation_loss(x, t).backward()
    fd = central_difference(lambda v: distillation_loss(v, t), s.clone())
    torch.testing.assert_close(x.grad, fd, rtol=1e-6, atol=1e-8)
    # KL(p || softmax(s)) has gradient softmax(s) - p per row; the batch mean divides by B
    closed = 0.5 * ((s.softmax(1) - t.softmax(1)) + (s.softmax(0) - t.softmax(0))) / 5
    torch.testing.assert_close(x.grad, closed, rtol=1e-10, atol=1e-12)


def test_gradient_wrt_the_embeddings_of_a_tiny_model_equals_finite_differences(make_model):
    model = make_model().double()  # float64 throughout: the logit scale and the cosine normalisation
    gen = torch.Generator().manual_seed(1)
    dim = len(model.vocab)
    image = torch.rand(4, dim, generator=gen, dtype=torch.float64)
    text = torch.rand(4, dim, generator=gen, dtype=torch.float64)
    teacher = torch.randn(4, 4, generator=gen, dtype=torch.float64) * 5
    loss = SparseContrastiveLoss(distill=0.7)

    def distill_part(img, txt):
        return loss(img, txt, model, step=0, teacher_logits=teacher)["distill"]

    x, y = image.clone().requires_grad_(True), text.clone().requires_grad_(True)
    distill_part(x, y).backward()
    torch.testing.assert_close(x.grad, central_difference(lambda v: distill_part(v, text), image.clone()),
                               rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(y.grad, central_difference(lambda v: distill_part(image, v), text.clone()),
                               rtol=1e-5, atol=1e-9)
    assert model.log_logit_scale.grad is not None  # the student's scale learns to match the teacher's too


def test_the_term_is_zero_when_student_equals_teacher_and_positive_otherwise():
    gen = torch.Generator().manual_seed(2)
    t = torch.randn(6, 6, generator=gen) * 4
    assert distillation_loss(t.clone(), t).item() == pytest.approx(0.0, abs=1e-6)
    assert distillation_loss(t + 3.0, t).item() == pytest.approx(0.0, abs=1e-6)  # softmax ignores a shift
    assert distillation_loss(t.T.contiguous(), t).item() > 1e-3
    assert distillation_loss(torch.zeros(6, 6), t).item() > 1e-3
    assert distillation_loss(2 * t, t).item() > 1e-3  # another temperature is another distribution
    with pytest.raises(ValueError, match="differ in shape"):
        distillation_loss(torch.zeros(3, 3), torch.zeros(4, 4))


def test_the_loss_module_names_the_part_and_leaves_the_rest_unchanged(make_model):
    model = make_model()
    gen = torch.Generator().manual_seed(3)
    img, txt = torch.rand(4, len(model.vocab), generator=gen), torch.rand(4, len(model.vocab), generator=gen)
    teacher = torch.randn(4, 4, generator=gen)
    plain = SparseContrastiveLoss(1e-3, 1e-3)(img, txt, model, 5)
    off = SparseContrastiveLoss(1e-3, 1e-3, distill=0.0)(img, txt, model, 5, teacher_logits=teacher)
    on = SparseContrastiveLoss(1e-3, 1e-3, distill=2.0)(img, txt, model, 5, teacher_logits=teacher)
    assert "distill" not in plain and set(off) == set(plain)
    assert all(torch.equal(off[k], plain[k]) for k in plain)
    assert on["distill"].item() > 0
    torch.testing.assert_close(on["loss"], plain["loss"] + on["distill"])
    with pytest.raises(ValueError, match="teacher logits"):
        SparseContrastiveLoss(distill=1.0)(img, txt, model, 0)


# ------------------------------------------------------------------------------------------ teacher scores
def test_teacher_logits_are_the_scaled_batch_products_sparse_or_dense():
    from tokenspace.sparse import SparseBatch

    rng = np.random.default_rng(0)
    image = np.maximum(rng.standard_normal((3, 7)), 0).astype(np.float32)  # 3 images
    text = np.maximum(rng.standard_normal((5, 7)), 0).astype(np.float32)  # 5 pairs
    image_of = np.array([0, 0, 1, 2, 2])
    idx = np.array([4, 1, 2])
    want = 2.5 * image[image_of[idx]] @ text[idx].T
    dense = TeacherScores(image, text, 2.5, image_of)
    sparse = TeacherScores(SparseBatch.from_dense(image), SparseBatch.from_dense(text), 2.5, image_of)
    assert len(dense) == 5 and dense.logits(idx).dtype == np.float32
    np.testing.assert_allclose(dense.logits(idx), want, rtol=1e-6)
    np.testing.assert_allclose(sparse.logits(idx), want, rtol=1e-6)
    with pytest.raises(ValueError, match="pairs"):
        TeacherScores(image, text, 1.0, image_of[:4])
    with pytest.raises(ValueError, match="logit scale"):
        TeacherScores(image, text, 0.0, image_of)


@pytest.fixture
def run_setup(tmp_path, tiny_pairs, tiny_vocab, make_config, make_model):
    """A tiny train manifest (one image with two captions), a student config file and two saved
    teachers: a sparse STAIR one and a dense twin."""
    paths, texts = tiny_pairs
    two = (texts[0], "the red dog on the sun")
    records = [Record("img0", str(paths[0]), texts[0], "train", captions=two)]
    records += [Record(f"img{i}", str(p), t, "train")
                for i, (p, t) in enumerate(zip(paths[1:], texts[1:]), 1)]
    manifest = write_manifest(records, tmp_path / "tiny.jsonl")
    tiny_vocab.save(tmp_path / "vocab.txt")
    student = make_config("stair", len(tiny_vocab), vocab=str(tmp_path / "vocab.txt"))
    student.save(tmp_path / "student.json")
    make_model("stair", seed=7).save_pretrained(tmp_path / "teacher-stair")
    make_model("dense", seed=8).save_pretrained(tmp_path / "teacher-dense")
    return tmp_path, manifest


def _recipe(root, manifest, **loss):
    return Recipe.from_dict({"name": "distil", "model": str(root / "student.json"), "batch_size": 4,
                             "seed": 3, "data": {"train": [f"{manifest}:train"]},
                             "stages": [{"name": "joint", "steps": 3, "lr": 1e-2}],
                             "loss": {"lambda": 1.0e-3, **loss}})


@pytest.mark.parametrize("family", ["stair", "dense"])
def test_teacher_scores_follow_the_student_pair_order(run_setup, family):
    root, manifest = run_setup
    records = pipeline.load_split(f"{manifest}:train")
    folder = str(root / f"teacher-{family}")
    teacher = load_teacher(folder)
    scores = teacher_scores(_recipe(root, manifest, distill=1.0, distill_teacher=folder), records,
                            home=root / "home", progress=False)
    assert len(scores) == 13  # 12 images, the first with two captions
    img = teacher.encode_image_grids(pipeline.image_grids(teacher, records, root / "home", False).grids)
    txt = teacher.encode_text([t for r in records for t in r.texts])
    img, txt = [x.to_dense() if hasattr(x, "to_dense") else x for x in (img, txt)]
    image_of = np.array([0] + list(range(12)))
    idx = np.array([0, 1, 5, 12])
    want = float(teacher.logit_scale.detach()) * img[image_of[idx]] @ txt[idx].T
    np.testing.assert_allclose(scores.logits(idx), want, rtol=1e-5, atol=1e-6)
    assert scores.logits(idx)[0, 0] == pytest.approx(scores.logits(idx)[1, 0])  # pairs 0 and 1: one image
    given = teacher_scores(_recipe(root, manifest, distill=1.0, distill_teacher=folder, distill_scale=10.0),
                           records, home=root / "home", progress=False)
    np.testing.assert_allclose(given.logits(idx), 10.0 * img[image_of[idx]] @ txt[idx].T,
                               rtol=1e-5, atol=1e-6)
    assert teacher_scores(_recipe(root, manifest), records) is None  # no distillation: no teacher loaded


# ------------------------------------------------------------------------------------------ end to end
def _rows(run):
    rows = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows]


def test_a_tiny_run_logs_the_distill_part_and_distill_zero_changes_nothing(run_setup):
    root, manifest = run_setup
    home, teacher = root / "home", str(root / "teacher-dense")
    runs = {}
    for name, loss in (("none", {}), ("zero", {"distill": 0.0, "distill_teacher": teacher}),
                       ("on", {"distill": 5.0, "distill_teacher": teacher})):
        model = pipeline.train(_recipe(root, manifest, **loss), root / name, home=home, progress=False)
        runs[name] = (model.state_dict(), _rows(root / name))
    on_rows = runs["on"][1]
    assert all("distill" in r and np.isfinite(r["distill"]) and r["distill"] > 0 for r in on_rows)
    assert all("distill" not in r for r in runs["none"][1] + runs["zero"][1])
    assert runs["zero"][1] == runs["none"][1]  # same batches, same numbers
    for k, v in runs["none"][0].items():
        assert torch.equal(v, runs["zero"][0][k]), k
    assert on_rows[0]["contrastive"] == runs["none"][1][0]["contrastive"]  # step 1: same start, same batch
    assert any(not torch.equal(v, runs["on"][0][k]) for k, v in runs["none"][0].items())
    saved = json.loads((root / "on" / "recipe.json").read_text())
    assert (saved["distill"], saved["distill_teacher"], saved["distill_scale"]) == (5.0, teacher, None)


def test_the_sparse_teacher_trains_too_and_a_resume_is_exact(run_setup):
    root, manifest = run_setup
    loss = {"distill": 1.0, "distill_teacher": str(root / "teacher-stair")}
    stages = [{"name": "a", "steps": 2, "lr": 1e-2}, {"name": "b", "steps": 2, "lr": 5e-3}]
    full = pipeline.train(Recipe.from_dict({**_recipe(root, manifest, **loss).to_dict(), "stages": stages}),
                          root / "full", home=root / "home", progress=False)
    first = Recipe.from_dict({**_recipe(root, manifest, **loss).to_dict(), "stages": stages[:1]})
    pipeline.train(first, root / "part", home=root / "home", progress=False)
    resumed = pipeline.train(Recipe.from_dict({**first.to_dict(), "stages": stages}), root / "part",
                             home=root / "home", resume=True, progress=False)
    assert [row["step"] for row in _rows(root / "part")] == [1, 2, 3, 4]
    assert all(row["distill"] > 0 for row in _rows(root / "full"))
    assert _rows(root / "full") == _rows(root / "part")  # the teacher's scores are computed again, the same
    for k, v in full.state_dict().items():
        torch.testing.assert_close(v, resumed.state_dict()[k])


def test_the_trainer_refuses_a_distilling_recipe_without_teacher_scores(make_model, tmp_path, run_setup):
    root, _ = run_setup
    r = Recipe(name="t", model="tiny", stages=[Stage("s", 1)], batch_size=4, distill=1.0,
               distill_teacher=str(root / "teacher-dense"))
    data = PairData.from_texts(np.zeros((6, 16, 2, 2), np.float16), [f"a {w}" for w in "abcdef"])
    with pytest.raises(ValueError, match="teacher's scores"):
        Trainer(make_model(), r, data, tmp_path / "run", progress=False)
    few = TeacherScores(np.ones((3, 4), np.float32), np.ones((3, 4), np.float32), 1.0)
    with pytest.raises(ValueError, match="cover 3 pairs"):
        Trainer(make_model(), r, data, tmp_path / "run", progress=False, teacher=few)


def test_the_scale_trainer_refuses_distillation_with_a_clear_message(run_setup):
    from tokenspace.train import scale

    root, manifest = run_setup
    r = _recipe(root, manifest, distill=1.0, distill_teacher=str(root / "teacher-dense"))
    with pytest.raises(ValueError, match="scale trainer does not distil"):
        scale.train(r, root / "scale-run", home=root / "home", progress=False)
    assert not (root / "scale-run").exists()


# ------------------------------------------------------------------------------------------ recipe keys
def _one_line_error(d) -> str:
    with pytest.raises(ValueError) as e:
        Recipe.from_dict(d)
    assert "\n" not in str(e.value)
    return str(e.value)


BASE = {"name": "r", "model": "stair-emoji", "stages": [{"name": "s", "steps": 1}]}


def test_recipe_keys_under_loss_are_read_and_checked(run_setup):
    root, _ = run_setup
    teacher = str(root / "teacher-dense")
    r = Recipe.from_dict({**BASE, "loss": {"distill": 1, "distill_teacher": teacher, "distill_scale": 20}})
    assert (r.distill, r.distill_teacher, r.distill_scale) == (1.0, teacher, 20.0)
    assert isinstance(r.distill, float)
    plain = Recipe.from_dict(BASE)
    assert (plain.distill, plain.distill_teacher, plain.distill_scale) == (0.0, None, None)
    assert "loss.distill must be >= 0" in _one_line_error(
        {**BASE, "loss": {"distill": -0.5, "distill_teacher": teacher}})
    assert "needs loss.distill_teacher" in _one_line_error({**BASE, "loss": {"distill": 1.0}})
    assert "no trained model folder" in _one_line_error(
        {**BASE, "loss": {"distill": 1.0, "distill_teacher": str(root / "no-such-model")}})
    assert "expected a number" in _one_line_error(
        {**BASE, "loss": {"distill": "lots", "distill_teacher": teacher}})
    assert "expected a string or null" in _one_line_error(
        {**BASE, "loss": {"distill": 1.0, "distill_teacher": 3}})
    assert "distill_scale must be > 0" in _one_line_error(
        {**BASE, "loss": {"distill": 1.0, "distill_teacher": teacher, "distill_scale": 0}})
    assert "unknown loss keys" in _one_line_error({**BASE, "loss": {"distil": 1.0}})


def test_dotted_set_options_reach_the_distill_keys(run_setup):
    root, _ = run_setup
    teacher = str(root / "teacher-stair")
    over = parse_overrides(["loss.distill=0.5", f"loss.distill_teacher={teacher}"])
    r = Recipe.load("stair-emoji", **over)
    assert (r.distill, r.distill_teacher) == (0.5, teacher)
    assert r.lambda_image == Recipe.load("stair-emoji").lambda_image  # the rest of loss: kept


def test_a_teacher_that_does_not_load_is_a_one_line_error(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    # it exists, so the recipe takes it; loading it is where it fails
    r = Recipe.from_dict({**BASE, "loss": {"distill": 1.0, "distill_teacher": str(broken)}})
    with pytest.raises(ValueError) as e:
        teacher_scores(r, [])
    assert "does not load" in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------ eval in both trainers
def _eval_rows(run):
    return [r for r in _rows(run) if "eval" in r]


@pytest.mark.parametrize("trainer", ["pipeline", "scale"])
def test_both_trainers_log_held_out_metrics_every_eval_every_steps(run_setup, trainer):
    from tokenspace.train import scale

    root, manifest = run_setup
    r = Recipe.from_dict({**_recipe(root, manifest).to_dict(), "eval_every": 2,
                          "data": {"train": [f"{manifest}:train"], "eval": [f"{manifest}:train"]}})
    train = pipeline.train if trainer == "pipeline" else scale.train
    train(r, root / trainer, home=root / "home", progress=False)
    rows = _eval_rows(root / trainer)
    # 3 steps: at step 2 (eval_every) and at the end (the scale trainer logged none before)
    assert [row["step"] for row in rows] == [2, 3]
    assert all(row["eval"]["n_images"] == 12.0 and 0 <= row["eval"]["image_retrieval_recall@1"] <= 1
               for row in rows)


@pytest.mark.parametrize("trainer", ["pipeline", "scale"])
def test_eval_every_without_eval_data_is_refused(run_setup, trainer):
    from tokenspace.train import scale

    root, manifest = run_setup
    r = Recipe.from_dict({**_recipe(root, manifest).to_dict(), "eval_every": 2})
    train = pipeline.train if trainer == "pipeline" else scale.train
    with pytest.raises(ValueError, match="no data.eval"):
        train(r, root / trainer, home=root / "home", progress=False)
