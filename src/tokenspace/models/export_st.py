"""A STAIR or fused model's text side as a sentence-transformers SparseEncoder folder (MLMTransformer +
SpladePooling, then a fused model's lexical anchor).

STAIR's text encoder is SPLADE's architecture: a BERT masked language model, log(1 + ReLU(logits)) and
a max over positions. ``export_sentence_transformers(model, out)`` writes it in the layout
sentence-transformers saves (``modules.json``: the MLM at the folder root, then ``1_SpladePooling``,
then ``2_Normalize`` for cosine models), so ``SparseEncoder(out).encode(texts)`` gives the vectors of
``model.encode_text(texts)``:

* the MLM is a plain ``BertForMaskedLM`` (config.json + model.safetensors) holding the tower's BERT, its
  MLM transform, the word embeddings (the tied decoder) and the MLM bias;
* STAIR never emits bracketed entries ([CLS], [unused0], ...); SpladePooling has no output mask, so their
  decoder bias is set to ``MASKED_BIAS`` (-1e4): the logit stays negative, ReLU makes it exactly 0;
* a model with a text top-n (``model.text_top_n``: each row keeps its n heaviest tokens) gets a TopN
  module after the pooling (models/st_top_n.py, copied into the folder: SparseEncoder's own
  ``max_active_dims`` would cut after the normalisation); such a folder loads with
  ``SparseEncoder(out, trust_remote_code=True)``;
* STAIR's rows are L2-normalised (cosine similarity, eq. 2): a Normalize module does the same, last,
  as ``encode_text`` does (cut, then normalise).

A fused model (models/fused.py, the release model's family) has the text side
``t * n(stair part's text vector) + anchor * n(bag of the text's content word pieces)``: its one STAIR
text part is written as above (MLM + SpladePooling, the part's own output mask), then a LexicalAnchor
module (models/st_anchor.py, copied into the folder; ``trust_remote_code=True``) forms that sum from the
same token ids, then the fused model's TopN and Normalize. Parts that take no part in the text side (text
weight 0: the release's tagger) are left out; a fused model whose text side has no STAIR part, or several
(two MLMs would need two forwards), is refused.

An inference-free model (models/inference_free.py) has no text network: its folder is sentence-transformers'
own ``SparseStaticEmbedding`` (the tokenizer and the stored weight of each token: what OpenSearch's
doc-only query encoders ship as), then TopN and Normalize as above. Its tokenizer truncates to
``max_text_len - 2`` word pieces without [CLS] / [SEP], the pieces tokenspace's own encoding keeps.

sentence-transformers is not needed to write the folder (only to read it).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from tokenspace.atomic import new_file_mode, replace_folder, temp_folder
from tokenspace.models.card import write_tokenizer_files

# written into every export: an existing OUT is replaced only when it holds this file (or nothing), so
# export-st never deletes a folder it did not write (a user's files, the source model itself)
MARKER = "tokenspace_export.json"
MARKER_FORMAT = "sentence-transformers-sparse-encoder"
MASKED_BIAS = -1.0e4  # far below any |h . e| of a trained BERT: ReLU(logit) = 0 for masked entries
MLM = "sentence_transformers.sparse_encoder.models.MLMTransformer"
STATIC = "sentence_transformers.sparse_encoder.models.SparseStaticEmbedding"
SPLADE = "sentence_transformers.sparse_encoder.models.SpladePooling"
NORMALIZE = "sentence_transformers.models.Normalize"
TOP_N_SOURCE = Path(__file__).with_name("st_top_n.py")  # copied into the folder for models with a top-n
TOP_N = f"{TOP_N_SOURCE.stem}.TopN"  # a module of the folder itself (trust_remote_code=True to load it)
ANCHOR_SOURCE = Path(__file__).with_name("st_anchor.py")  # copied into a fused model's folder
ANCHOR = f"{ANCHOR_SOURCE.stem}.LexicalAnchor"
FAMILIES = ("stair", "fused", "inference-free")  # the families whose text side export-st writes


def _mlm(model):
    """A BertForMaskedLM carrying the text tower's weights (and the output mask in the bias)."""
    from transformers import BertForMaskedLM  # start-up: transformers takes seconds to import

    tower = model.text_tower
    if type(tower).__name__ != "BertMLMTower":
        raise ValueError(f"export-st needs a BERT masked-LM text tower, {model.config.name!r} has "
                         f"{model.config.text_tower.get('type')!r}")
    mlm = BertForMaskedLM(tower.bert.config)
    mlm.bert.load_state_dict(tower.bert.state_dict())
    mlm.cls.predictions.transform.load_state_dict(tower.mlm_transform.state_dict())
    with torch.no_grad():
        mlm.cls.predictions.decoder.weight.copy_(tower.word_embeddings)  # tied to the word embeddings
        bias = tower.mlm_bias.detach().clone()
        mask = getattr(model, "output_mask", None)
        if mask is not None:
            bias[mask.to(bias.device) == 0] = MASKED_BIAS
        mlm.cls.predictions.bias.copy_(bias)
        if mlm.cls.predictions.decoder.bias is not None:
            mlm.cls.predictions.decoder.bias.copy_(bias)
    return mlm.eval()


def is_export(folder: Path, fmt: str = MARKER_FORMAT) -> bool:
    """Whether ``folder`` is a previous export of format ``fmt`` (its marker file says so; export-onnx
    writes the same marker with its own format)."""
    try:
        return json.loads((folder / MARKER).read_text(encoding="utf-8")).get("format") == fmt
    except (OSError, ValueError, AttributeError):  # no marker, not JSON, not an object
        return False


def check_out(out: Path, source: str | Path | None = None, fmt: str = MARKER_FORMAT,
              command: str = "export-st") -> None:
    """Refuse an ``out`` that replacing would lose something: a file, a non-empty folder that is not a
    previous export, or (``source``: the folder the model was loaded from) that folder, one inside it or
    one holding it. Nothing is written before this passes."""
    if source is not None:
        src, dst = Path(source).resolve(), out.resolve()
        where = ("is the model's own folder" if dst == src else
                 f"lies inside the model folder {source}" if src in dst.parents else
                 f"holds the model folder {source}" if dst in src.parents else None)
        if where:
            raise ValueError(f"{out}: {where}; choose an output folder outside the model's")
    if out.is_symlink():  # replacing would follow or break a link the user made: not ours to decide
        raise ValueError(f"{out}: is a symbolic link; choose a new output folder")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: is a file, not a folder; choose a new output folder")
    if out.is_dir() and any(out.iterdir()) and not is_export(out, fmt):
        raise ValueError(f"{out}: is a non-empty folder that is not a previous {command} export "
                         f"(no {MARKER}); choose a new or empty output folder")


def check_family(family: str) -> None:
    """Only STAIR's text side is SPLADE's architecture, alone or inside a fused model; an inference-free
    model's is a table (ValueError otherwise)."""
    if family not in FAMILIES:
        raise ValueError(f"export-st writes the SPLADE-style text side of STAIR models (alone or fused) and "
                         f"inference-free query tables; a {family!r} model's text side is not an MLM with max "
                         "pooling")


def text_parts(model) -> tuple:
    """(the STAIR model whose MLM the folder holds, its text weight, the lexical anchor) of ``model``:
    a STAIR model is itself, weight 1 and no anchor; a fused model its one STAIR part with text weight
    != 0 and its anchor (ValueError for other text sides)."""
    check_family(model.family)
    if model.family == "inference-free":
        return None, 1.0, None
    if model.family == "stair":
        return model, 1.0, None
    texts = [(w, p) for w, p in zip(model.text_weights, model.parts) if w]
    bad = [p.family for _, p in texts if p.family != "stair"]
    if bad or len(texts) != 1:
        found = ", ".join(f"{p.family} (text weight {w:g})" for w, p in texts) or "none"
        raise ValueError(f"export-st writes a fused model whose text side is one STAIR part (plus the lexical "
                         f"anchor); {model.config.name!r} has text parts: {found}")
    (weight, part), = texts
    return part, float(weight), float(model.anchor)


def _static(model, folder: Path) -> dict:
    """An inference-free model's query table as a SparseStaticEmbedding module folder (its tokenizer files,
    ``weight`` in model.safetensors, frozen); returns its modules.json entry."""
    from safetensors.torch import save_file  # start-up: only an inference-free export writes it here

    folder.mkdir()
    # no [CLS] / [SEP] in its input (add_special_tokens=False): two more word pieces fit, so the limit is
    # the model's less those two, the pieces the model's own encoding keeps
    write_tokenizer_files(folder, model.tokenizer.vocab, model.config.max_text_len - 2)
    save_file({"weight": model.query_weights.detach().float().cpu().contiguous()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"frozen": True}) + "\n")
    return {"idx": 0, "name": "0", "path": folder.name, "type": STATIC}


def _non_content_ids(model) -> list[int]:
    """The token ids the fused model's bag leaves out (its ``content`` buffer: stop words, specials, ...)."""
    return torch.nonzero(~model.content.bool()).flatten().tolist()


def export_sentence_transformers(model, out: str | Path, source: str | Path | None = None) -> Path:
    """Write ``model``'s text side (STAIR) as a SparseEncoder folder at ``out``. An existing ``out`` is
    replaced atomically only when it is empty or a previous export (``check_out``); ``source`` is the
    folder the model was loaded from, which ``out`` must neither be, hold nor lie in."""
    stair, text_weight, anchor = text_parts(model)
    out = Path(out)
    check_out(out, source)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_folder(out)  # not tempfile.mkdtemp: its 0700 would make the exported folder private
    try:
        vocab = model.tokenizer.vocab
        if stair is None:  # inference-free: the table as SparseStaticEmbedding
            modules = [_static(model, tmp / "0_SparseStaticEmbedding")]
        else:
            mlm = _mlm(stair)
            mlm.save_pretrained(str(tmp))  # config.json (model_type bert, BertForMaskedLM) + model.safetensors
            write_tokenizer_files(tmp, vocab, model.config.max_text_len)
            modules = [{"idx": 0, "name": "0", "path": "", "type": MLM},
                       {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": SPLADE}]
        mode = new_file_mode(tmp)
        for f in tmp.rglob("*.safetensors"):  # safetensors writes 0600
            os.chmod(f, mode)
        if anchor is not None:  # a fused model: the weighted STAIR vector plus the anchor's bag
            n = len(modules)
            modules.append({"idx": n, "name": str(n), "path": f"{n}_LexicalAnchor", "type": ANCHOR})
            (tmp / f"{n}_LexicalAnchor").mkdir()
            (tmp / f"{n}_LexicalAnchor" / "config.json").write_text(json.dumps(
                {"vocab_size": len(model.vocab), "anchor": anchor, "text_weight": text_weight,
                 "non_content_ids": _non_content_ids(model)}) + "\n")
            shutil.copyfile(ANCHOR_SOURCE, tmp / ANCHOR_SOURCE.name)
        # encode_text' order (DualEncoder.rows): the top-n cut, then the normalisation
        if model.text_top_n:
            n = len(modules)
            modules.append({"idx": n, "name": str(n), "path": f"{n}_TopN", "type": TOP_N})
            (tmp / f"{n}_TopN").mkdir()
            (tmp / f"{n}_TopN" / "config.json").write_text(json.dumps({"top_n": int(model.text_top_n)}) + "\n")
            shutil.copyfile(TOP_N_SOURCE, tmp / TOP_N_SOURCE.name)
        if model.similarity_fn_name == "cosine":
            n = len(modules)
            modules.append({"idx": n, "name": str(n), "path": f"{n}_Normalize", "type": NORMALIZE})
            (tmp / f"{n}_Normalize").mkdir()
        (tmp / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
        (tmp / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": model.config.max_text_len - (2 if stair is None else 0),
                        "do_lower_case": False}, indent=2) + "\n")
        if stair is not None:
            (tmp / "1_SpladePooling").mkdir()
            (tmp / "1_SpladePooling" / "config.json").write_text(json.dumps(
                {"pooling_strategy": "max", "activation_function": "relu", "word_embedding_dimension": len(vocab)},
                indent=2) + "\n")
        (tmp / "config_sentence_transformers.json").write_text(json.dumps(
            {"model_type": "SparseEncoder", "prompts": {"query": "", "document": ""},
             "default_prompt_name": None, "similarity_fn_name": "dot"}, indent=2) + "\n")
        # st_top_n.py / st_anchor.py are the folder's own code
        trust = ", trust_remote_code=True" if model.text_top_n or anchor is not None else ""
        body = ("SparseStaticEmbedding: the tokenizer and a stored weight per token, no text network"
                if stair is None else "MLM + SPLADE max pooling")
        body += (f" + the lexical anchor (st_anchor.py: {text_weight:g} x the STAIR part's unit vector + "
                 f"{anchor:g} x the unit bag of the text's content word pieces)" if anchor is not None else "")
        (tmp / "README.md").write_text(
            f"---\nlibrary_name: sentence-transformers\ntags:\n- sparse-encoder\n- splade\n- tokenspace\n---\n\n"
            f"# {model.config.name}: text encoder\n\nThe text side of the tokenspace {model.family} model "
            f"`{model.config.name}` as a sentence-transformers SparseEncoder ({body}"
            f"{f' + the {model.text_top_n} heaviest tokens (st_top_n.py)' if model.text_top_n else ''}"
            f"{' + L2 normalisation' if model.similarity_fn_name == 'cosine' else ''}), written by "
            f"`tokenspace export-st`. Its vectors equal `model.encode_text(texts)`.\n\n"
            "```python\nfrom sentence_transformers import SparseEncoder\n\n"
            f"encoder = SparseEncoder(\"path/to/this/folder\"{trust})\n"
            "vectors = encoder.encode([\"a red dog\"])\n```\n\n"
            + ("Stop words, specials and punctuation weigh 0 in the table, as in tokenspace's own queries.\n"
               if stair is None else
               "Bracketed vocabulary entries ([CLS], [unused0], ...) carry a decoder bias of -1e4, so they are "
               "never emitted (STAIR's output mask).\n"), encoding="utf-8")
        (tmp / MARKER).write_text(json.dumps({"format": MARKER_FORMAT, "model": model.config.name}, indent=2)
                                  + "\n")
        if out.exists():
            check_out(out, source)  # again: the folder may have changed while the export was written
        replace_folder(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
