"""The files that make a model folder open in the Hugging Face ecosystem: tokenizer files and a model card.

``save_pretrained`` writes, beside tokenspace's own config.json / model.safetensors / vocab.txt:

* ``tokenizer.json`` (the vocabulary's `tokenizers` pipeline with BERT's [CLS] ... [SEP] template),
  ``tokenizer_config.json`` and ``special_tokens_map.json``: ``transformers.AutoTokenizer
  .from_pretrained(folder)`` loads them and gives the ids the model encodes text with;
* ``README.md``: a model card (front matter + architecture, data, recipe, metrics, licence), from the
  model and, for a trained model, the run's ``recipe.json`` and ``log.jsonl`` (``run_info``).

config.json carries ``architectures`` ([the family's class]) and ``tokenspace_version`` so hub tooling
can tell what a folder holds; tokenspace's own fields sit beside them. It carries no ``model_type``, as
timm's and open_clip's folders carry none: transformers' AutoTokenizer reads config.json first, and a
``model_type`` that transformers does not know sends it to its generic config, which warns "You are
using a model of type `tokenspace` to instantiate a model of type ``" on every load of the tokenizer.
Without the key it goes straight to tokenizer_config.json's ``tokenizer_class``, silently. Folders
written before still load (``HF_KEYS``: read back and ignored).
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, processors

from tokenspace import __version__

# ignored when a config is read back (model_type: written by earlier versions)
HF_KEYS = ("model_type", "architectures", "tokenspace_version")

PAPERS = {
    "stair": "STAIR: Learning Sparse Text and Image Representation in Grounded Tokens (Chen et al., 2023)",
    "visualsparta": "VisualSparta: An Embarrassingly Simple Approach to Large-scale Text-to-Image Search "
                    "with Weighted Bag-of-words (Lu et al., 2021)",
    "sparse-clip": "Sparse CLIP: a widened ReLU projection learned with the CLIP loss",
    "dense": "a dense CLIP-style baseline with the same towers (not sparse)",
    "sparsified": "a sparse head over the vocabulary trained on a frozen dense model's embeddings (not a paper model)",
    "tagger": "a training-free tagger from the image backbone's ImageNet classifier (not a paper model)",
    "fused": "sparse parts over one vocabulary summed (e.g. a trained STAIR model and the training-free "
             "tagger), each query's own words kept in its vector (not a paper model)",
}


def hf_config_keys(model) -> dict:
    return {"architectures": [type(model).__name__], "tokenspace_version": __version__}


def write_tokenizer_files(folder: Path, vocab, max_length: int, lowercase: bool = True) -> None:
    """tokenizer.json + tokenizer_config.json + special_tokens_map.json for ``vocab``'s tokenizer."""
    tok = Tokenizer.from_str(vocab.tokenizer().to_str())  # a copy: the template is the model's
    if "[CLS]" in vocab and "[SEP]" in vocab:
        cls_id, sep_id = vocab.id("[CLS]"), vocab.id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok.save(str(folder / "tokenizer.json"))
    special = {k: t for k, t in (("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"),
                                 ("cls_token", "[CLS]"), ("mask_token", "[MASK]")) if t in vocab}
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "model_max_length": max_length,
              "tokenize_chinese_chars": True, "strip_accents": None, "clean_up_tokenization_spaces": True,
              **special}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def run_info(run_dir: str | Path) -> dict:
    """What a training run folder knows for the card: the recipe and the last evaluation."""
    run = Path(run_dir)
    info: dict = {}
    if (run / "recipe.json").exists():
        info["recipe"] = json.loads((run / "recipe.json").read_text())
    if (run / "log.jsonl").exists():
        steps, last = 0, None
        for line in (run / "log.jsonl").read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            steps = max(steps, int(rec.get("step", 0) or 0))
            if "eval" in rec:
                last = rec
        info["steps"] = steps
        if last is not None:
            info["metrics"] = last["eval"]
            info["metrics_step"] = last.get("step")
    return info


def _table(rows: list[tuple[str, str]], head: tuple[str, str]) -> str:
    out = [f"| {head[0]} | {head[1]} |", "| --- | --- |"]
    out += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(out)


def _flat_metrics(metrics) -> list[tuple[str, str]]:
    rows = []
    for key, value in (metrics or {}).items():
        if isinstance(value, dict):
            rows += [(f"{key} {k}", f"{v:.4f}" if isinstance(v, float) else str(v)) for k, v in value.items()]
        else:
            rows.append((key, f"{value:.4f}" if isinstance(value, float) else str(value)))
    return rows


def render_card(model, info: dict | None = None) -> str:
    """README.md of a model folder. ``info``: ``run_info`` output and/or ``data``, ``command``, ``notes``."""
    info = info or {}
    cfg = model.config
    recipe = info.get("recipe") or {}
    n_params = sum(p.numel() for p in model.parameters())
    tags = ["tokenspace", "sparse-retrieval", "image-text-retrieval", cfg.family]
    lines = ["---", "library_name: tokenspace", "license: other",
             "license_name: see-licence-section", "tags:"] + [f"- {t}" for t in tags] + ["---", ""]
    lines += [f"# {cfg.name}", "", f"A tokenspace **{cfg.family}** model: {PAPERS.get(cfg.family, cfg.family)}.",
              "Images and texts encode to sparse vectors over the vocabulary below (one weight per token), "
              "searched with tokenspace's inverted index.", ""]
    lines += ["## Use", "", "```python", "import tokenspace", "", 'model = tokenspace.load("path/to/this/folder")',
              'vectors = model.encode_text(["a red dog"])', "print(model.decode(vectors, top_k=10))", "```", "",
              "The tokenizer files open with `transformers.BertTokenizer.from_pretrained(folder)` (or "
              "`AutoTokenizer`, which also reads config.json and warns that its model type `tokenspace` is "
              "not a transformers model: harmless, only the tokenizer is loaded).", ""]
    arch = [("family", cfg.family), ("class", type(model).__name__),
            ("image tower", cfg.image_tower.get("type", "?")), ("text tower", cfg.text_tower.get("type", "?")),
            ("output dimensions", str(len(model.vocab))), ("similarity", model.similarity_fn_name),
            ("sparse output", str(model.sparse)), ("max text tokens", str(cfg.max_text_len)),
            ("parameters", f"{n_params:,}")]
    lines += ["## Architecture", "", _table(arch, ("", "")), ""]
    data = info.get("data") or recipe.get("data")
    lines += ["## Training data", ""]
    lines += [f"```json\n{json.dumps(data, indent=2)}\n```" if data else
              "Not recorded: this folder was saved outside a training run (or the run kept no recipe).", ""]
    lines += ["## Recipe", ""]
    if recipe:
        lines += [f"```json\n{json.dumps(recipe, indent=2)}\n```", ""]
        if info.get("steps"):
            lines += [f"Steps logged: {info['steps']}.", ""]
    else:
        lines += ["Not recorded.", ""]
    if info.get("command"):
        lines += [f"Command: `{info['command']}`", ""]
    lines += ["## Metrics", ""]
    rows = _flat_metrics(info.get("metrics"))
    if rows:
        at = f" (evaluation at step {info['metrics_step']})" if info.get("metrics_step") is not None else ""
        lines += [f"The run's last evaluation{at}:", "", _table(rows, ("metric", "value")), ""]
    else:
        lines += ["Not measured for this folder.", ""]
    if info.get("notes"):
        lines += ["## Notes", "", str(info["notes"]), ""]
    lines += ["## Licence", "",
              "tokenspace (the code that built and reads this folder) is Apache-2.0. The weights derive from "
              "the pretrained towers named in config.json and from the training data above: their own "
              "licences apply to this folder too (see each asset's package and LICENSE file, "
              "`tokenspace assets status`).", ""]
    return "\n".join(lines)
