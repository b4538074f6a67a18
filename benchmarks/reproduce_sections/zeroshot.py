"""Zero-shot category classification (templates + ensemble) and a linear probe, sparse vs dense."""
from __future__ import annotations

from collections.abc import Sequence

from benchmarks.reproduce_sections.bench import Bench, Section, models_line
from benchmarks.reproduce_sections.labels import class_indices, clean_classname
from benchmarks.reproduce_sections.plan import Plan
from benchmarks.reproduce_sections.runs import MAIN
from tokenspace.eval import LinearProbeEvaluator, ZeroShotEvaluator, markdown_table


def zeroshot_row(bench: Bench, run: str, spec: str, templates: Sequence[str], encode=None) -> dict[str, float]:
    """Accuracy per single template and for the ensemble (cosine-averaged prompts, CLIP style);
    ``encode`` replaces the model's text encoder (STAIR_IMAGE's token masks)."""
    classes, labels = class_indices([clean_classname(r.label or "?") for r in bench.records(spec, run)])
    img, encode = bench.images(run, spec), encode or bench.models[run].encode_text
    out = {f"acc1[{t}]": ZeroShotEvaluator(classes, labels, [t], metric="cosine")(img, encode)["acc1"]
           for t in templates}
    ens = ZeroShotEvaluator(classes, labels, list(templates), ks=(1, min(5, len(classes))), metric="cosine")
    out.update({f"ensemble_{k}": v for k, v in ens(img, encode).items()})
    out["n_classes"] = float(len(classes))
    return out


def probe_row(bench: Bench, run: str, test: str, train: str,
              cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0)) -> dict[str, float]:
    """Logistic-regression probe on frozen image features: train split -> test split, category labels."""
    tr = [clean_classname(r.label or "?") for r in bench.records(train, run)]
    te = [clean_classname(r.label or "?") for r in bench.records(test, run)]
    classes = sorted(set(tr) | set(te))
    _, ytr = class_indices(tr, classes)
    _, yte = class_indices(te, classes)
    return LinearProbeEvaluator(ytr, yte, cs=cs)(bench.images(run, train), bench.images(run, test))


def build_zeroshot(bench: Bench, plan: Plan, runs: Sequence[str] = MAIN) -> Section:
    """Zero-shot category classification with templates + ensemble, and a linear probe, sparse vs dense."""
    runs = bench.present(runs)
    body = models_line(bench, runs)
    numbers: dict = {}
    for spec, templates in plan.zeroshot.items():
        rows = {bench.label(r): zeroshot_row(bench, r, spec, templates) for r in runs}
        numbers.update({f"{k} · {spec}": v for k, v in rows.items()})
        cols = [f"acc1[{t}]" for t in templates] + ["ensemble_acc1", "ensemble_mean_per_class_recall"]
        heads = {f"acc1[{t}]": f"“{t}” acc1 (%)" for t in templates} | {
            "ensemble_acc1": "ensemble acc1 (%)", "ensemble_mean_per_class_recall": "ensemble mean/class (%)"}
        n = int(next(iter(rows.values()))["n_classes"]) if rows else 0
        body += f"**{spec}** ({n} categories = Record.label)\n\n" + markdown_table(rows, cols, headers=heads) + "\n"
    probe = {f"{bench.label(r)} · {test}": probe_row(bench, r, test, train, plan.probe_cs)
             for test, train in plan.probe.items() for r in runs}
    numbers.update({f"probe · {k}": v for k, v in probe.items()})
    body += ("**Linear probe** (scikit-learn logistic regression on L2-normalised frozen image features, C "
             "chosen on 20% of the train split; train → test: "
             + ", ".join(f"{tr} → {te}" for te, tr in plan.probe.items()) + "; STAIR features stay sparse)\n\n"
             + markdown_table(probe, ["lp_acc1", "lp_val_acc1", "lp_C"],
                              headers={"lp_acc1": "test acc1 (%)", "lp_val_acc1": "val acc1 (%)", "lp_C": "C"}))
    return Section("zero-shot", "Zero-shot classification and linear probe", body, numbers, runs)
