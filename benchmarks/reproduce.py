"""Regenerate the paper-style sections of docs/results.md from models trained by the recipes.

    make reproduce                                    # = python -m benchmarks.reproduce
    python -m benchmarks.reproduce --only retrieval flops-ablation
    python -m benchmarks.reproduce --quick            # plumbing check: tiny data, 3 steps per stage, scratch files

Models (trained with tokenspace.pipeline.train, or reused when ``<runs>/<name>/model/model.safetensors``
exists; the default runs dir is the demo's, so `make demo`'s stair-emoji and dense-emoji are reused):
stair-emoji (3-stage), stair-emoji-single (single-stage, same budget), dense-emoji, and the FLOPs
ablation stair-emoji-lambda1e-2 / -lambda1e-4 (lambda 1e-3 is stair-emoji itself).

Sections (STAIR paper analogues): retrieval (Table 2/7), flops-ablation (Fig. 8), interpretability
(Table 4/8, Fig. 4/5/6), zero-shot (+ linear probe), text-free (STAIR_IMAGE, App. E.2), localization
(App. E.1). Each section is a module of benchmarks/reproduce_sections/ whose builder takes a Bench (models
+ encoded data) and returns a Section; this driver only wires training/loading, writing the doc and
benchmarks/results/reproduce.json.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# the section builders and their helpers, also imported from here by steering.py, release_model.py, tests
from benchmarks.common import run_record
from benchmarks.reproduce_sections.bench import HEADERS, R_COLS, Bench, Section, retrieval_row  # noqa: F401
from benchmarks.reproduce_sections.flops import build_flops
from benchmarks.reproduce_sections.interpretability import (  # noqa: F401
    TOKEN_KS,
    backbone_reference,
    build_interpretability,
    decode_side_by_side,
    dense_top_tokens,
    token_accuracy_row,
)
from benchmarks.reproduce_sections.labels import class_indices, clean_classname, concept, showcase_rows  # noqa: F401
from benchmarks.reproduce_sections.localization import build_localization, cell_scores, heatmap_queries  # noqa: F401
from benchmarks.reproduce_sections.plan import CLIPART_TEMPLATES, EMOJI_TEMPLATES, FULL, QUICK, SHOWCASE, Plan  # noqa: F401
from benchmarks.reproduce_sections.retrieval import build_retrieval
from benchmarks.reproduce_sections.runs import LAMBDAS, MAIN, RUNS, STAIRS, Run, quick_overrides  # noqa: F401
from benchmarks.reproduce_sections.textfree import build_textfree
from benchmarks.reproduce_sections.zeroshot import build_zeroshot, probe_row, zeroshot_row  # noqa: F401
from tokenspace import pipeline
from tokenspace.atomic import write_text
from tokenspace.eval import ResultsDoc
from tokenspace.models.registry import load
from tokenspace.train.recipe import Recipe

ROOT = Path(__file__).resolve().parent.parent
# the full generated sections go beside the JSON (docs/results.md quotes the current rows); figures into docs/img
DOC = ROOT / "benchmarks" / "results" / "reproduce.md"
IMG = ROOT / "docs" / "img"
JSON_OUT = ROOT / "benchmarks" / "results" / "reproduce.json"


def log(msg: str) -> None:
    print(f"[reproduce] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- wiring
SECTIONS = ("retrieval", "flops-ablation", "interpretability", "zero-shot", "text-free", "localization")
NEEDS = {"retrieval": MAIN, "flops-ablation": tuple(r for r, _ in LAMBDAS), "interpretability": MAIN,
         "zero-shot": MAIN, "text-free": STAIRS, "localization": ("stair-emoji",)}


def build_section(name: str, bench: Bench, plan: Plan, img_dir: Path, doc: ResultsDoc) -> Section:
    """Dispatch one section by name (the --only names)."""
    if name == "flops-ablation":
        return build_flops(bench, plan, img_dir, doc)
    if name == "localization":
        return build_localization(bench, plan, img_dir, doc)
    return {"retrieval": build_retrieval, "interpretability": build_interpretability, "zero-shot": build_zeroshot,
            "text-free": build_textfree}[name](bench, plan)


def describe(run: str, quick: bool) -> str:
    """Recipe + overrides + step count, for the 'Models:' line of each section."""
    spec = RUNS[run]
    r = Recipe.load(spec.recipe, **spec.recipe_overrides(quick))
    extra = f", λ={r.lambda_image:g}" if r.lambda_image or r.lambda_text else ""
    return f"recipe {spec.recipe}{extra}, {len(r.stages)} stage(s), {r.total_steps} steps, batch {r.batch_size}"


def trained(run: str, runs_dir: Path, home, quick: bool):
    """The run's model: reused when its folder holds one, else trained (resuming any checkpoint)."""
    out = runs_dir / run
    if (out / "model" / "model.safetensors").exists():
        log(f"{run}: reusing {out / 'model'}")
        return load(out / "model")
    spec = RUNS[run]
    over = spec.recipe_overrides(quick)
    log(f"{run}: training recipe {spec.recipe} -> {out}")
    t0 = time.time()
    model = pipeline.train(spec.recipe, out, home=home, resume=True, progress=True, **over)
    log(f"{run}: trained in {time.time() - t0:.0f}s")
    return model


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if np.isnan(x) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def save_numbers(path: Path, sections: Sequence[Section], command: str, runs_dir: Path, bench: Bench,
                 record: dict | None = None) -> None:
    """Merge this invocation's sections into the JSON (other sections kept: --only updates its own)."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.setdefault("sections", {})
    for s in sections:
        doc["sections"][s.name] = {**(record or {}), "command": command, "runs_dir": str(runs_dir),
                                   "updated": time.strftime("%F %T"),
                                   "models": {r: bench.provenance.get(r, "") for r in s.runs},
                                   "numbers": _jsonable(s.numbers)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(doc, indent=1, ensure_ascii=False))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=None, help="run folders (default runs/demo; --quick: a temp dir)")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), metavar="SECTION",
                   help=f"sections to regenerate: {', '.join(SECTIONS)}")
    p.add_argument("--quick", action="store_true", help="tiny data, 3 steps per stage: checks the plumbing")
    p.add_argument("--available-only", action="store_true",
                   help="train nothing: use only the models already in --runs (rows of the others are left out)")
    p.add_argument("--results", type=Path, default=None, help="results markdown (default benchmarks/results/reproduce.md; "
                   "--quick: a temp file, quick numbers never land in the real doc)")
    p.add_argument("--json", type=Path, default=None, help="numbers file (default benchmarks/results/reproduce.json;"
                   " --quick: beside --results)")
    p.add_argument("--home", type=Path, default=None, help="asset home (default ~/.cache/tokenspace)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="reproduce-quick-")) if a.quick else None
    runs_dir = a.runs or (scratch / "runs" if a.quick else ROOT / "runs" / "demo")
    results = a.results or (scratch / "results.md" if a.quick else DOC)
    json_out = a.json or (results.parent / "reproduce.json" if a.quick else JSON_OUT)
    img_dir = IMG if results == DOC else results.parent / "img"
    doc, plan = ResultsDoc(results), QUICK if a.quick else FULL
    command = "python -m benchmarks.reproduce" + ("" if argv is None and len(sys.argv) < 2 else
                                                   " " + shlex.join(sys.argv[1:] if argv is None else argv))
    t0 = time.time()
    needed = list(dict.fromkeys(r for s in a.only for r in NEEDS[s]))
    if a.available_only:  # no training: the sections show the models that are already there
        missing = [r for r in needed if not (runs_dir / r / "model" / "model.safetensors").exists()]
        if missing:
            log(f"--available-only: leaving out untrained {', '.join(missing)}")
        needed = [r for r in needed if r not in missing]
    models = {r: trained(r, runs_dir, a.home, a.quick) for r in needed}
    log(f"models ready in {time.time() - t0:.0f}s")
    bench = Bench(models, home=a.home, progress=True, provenance={r: describe(r, a.quick) for r in needed})
    done = []
    for name in a.only:
        t1 = time.time()
        sec = build_section(name, bench, plan, img_dir, doc)
        make = "  (make reproduce)" if command == "python -m benchmarks.reproduce" else ""
        doc.update(sec.name, sec.body, command=command + make, heading=sec.heading)
        done.append(sec)
        save_numbers(json_out, [sec], command, runs_dir, bench, run_record(__file__, argv))
        print(f"\n## {sec.heading}\n\n{sec.body}", flush=True)
        log(f"{name}: {time.time() - t1:.0f}s")
    log(f"wrote {len(done)} section(s) to {results} and numbers to {json_out} in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
