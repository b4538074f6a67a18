"""A model's encoders as ONNX files, checked against PyTorch (``tokenspace export-onnx MODEL OUT``).

The one road from a model to ONNX: ``export_module`` (the TorchScript-based exporter, opset 18) and
``session`` (ONNX Runtime on the CPU). ``encode --tower onnx`` runs its temporary image tower through
them (encode.py: OnnxImageTower), and ``export_onnx`` writes two files a user keeps:

* ``image_encoder.onnx``: ``pixels`` [B, 3, S, S] float32 -> ``vector`` [B, D] float32;
* ``text_encoder.onnx``: ``input_ids``, ``attention_mask`` [B, L] int64 -> ``vector`` [B, D] float32.

Each graph holds everything ``encode_image`` / ``encode_text`` run after preprocessing: the tower, the
family's head (the sparse head of every sparse family), top-n pruning and the L2 normalisation of
cosine models (``DualEncoder.rows``), so a row of ``vector`` is the dense form of the row encode_*
returns. Before anything is written, both files are run by ONNX Runtime on images and texts other than
the export's examples (other batch sizes and text lengths) and compared with encode_*: a difference
above ``tol`` (1e-4) is an error, not a file.

What stays outside the graphs, written down in the folder's ``tokenspace_export.json``: the pixels are
``model.preprocess(images)`` (letterboxed on white to S x S, PIL bicubic, then ``(x - mean) / std`` on
0..255 values), the ids ``model.tokenize(texts)`` (the folder's ``tokenizer.json``, the one
``transformers.AutoTokenizer`` reads). ``dimensions.txt`` names the D output dimensions.

Where the exporter needs help (all exact, checked by the comparison above):
* antialiased bilinear resizing (a fused model reading its images at several sizes) has no ONNX
  symbolic; ``_resize_antialiased`` writes it as the two matrix products it is for a fixed input size;
* nn.TransformerEncoder's fused inference kernel has no symbolic either: the export runs with the
  fast path off (the same arithmetic, unfused);
* models/maxproj.py builds its max projection as one graph while exporting (its loop over slabs would
  be unrolled for the example's batch size).

``int8=True`` also writes ``*.int8.onnx``: ONNX Runtime's dynamic quantisation (weights int8, activations
quantised per batch); not checked to ``tol`` (it is lossy by design): docs/benchmarks.md has its speed
and recall on emoji:test (benchmarks/onnx_export.py).
"""
from __future__ import annotations

import contextlib
import json
import logging
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from tokenspace.atomic import replace_folder, temp_folder
from tokenspace.models.card import write_tokenizer_files
from tokenspace.models.export_st import MARKER, check_out

OPSET = 18
IMAGE_FILE = "image_encoder.onnx"
TEXT_FILE = "text_encoder.onnx"
INT8_SUFFIX = ".int8.onnx"
DIMENSIONS_FILE = "dimensions.txt"
MARKER_FORMAT = "onnx"
DEFAULT_TOL = 1e-4
# the products int8 speeds up on a CPU (the vocabulary projections, BERT's layers, the heads); convolutions
# stay float: ONNX Runtime has no fast int8 kernel for them, and a convolution whose weight comes from
# another node (a tower shared by two image sizes) cannot be quantised at all
INT8_OPS = ["MatMul", "Gemm"]
PROBE_TEXTS = ("a", "a red heart", "the big blue cat with a hat on a small green ball under the moon",
               "smiling face with tears of joy", "dog")


class OnnxExportError(RuntimeError):
    """A model (or one side of it) that cannot be exported, or whose export does not match PyTorch."""


class ImageEncoder(nn.Module):
    """pixels [B, 3, S, S] -> the rows of ``model.encode_image`` [B, D] (dense, float32)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        # a fused model finds its packed grid's shapes by running its tower once, on first use: here,
        # before the tracer runs, so that probe never enters the graph
        getattr(model, "packed_sizes", None)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        m = self.model
        return m.rows(m.image_embed(m.image_grid(pixels)), m.image_top_n)


class TextEncoder(nn.Module):
    """input_ids, attention_mask [B, L] -> the rows of ``model.encode_text`` [B, D] (dense, float32)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        m = self.model
        return m.rows(m.text_embed(input_ids, attention_mask), m.text_top_n)


def _axis_matrix(n_in: int, n_out: int, align_corners: bool) -> torch.Tensor:
    """[n_out, n_in]: antialiased bilinear resizing along one axis as a matrix (it is linear and separable),
    read off PyTorch's own kernel applied to the identity, so the graph computes what F.interpolate does."""
    eye = torch.eye(n_in)[None, None]  # [1, 1, n_in, n_in]: column j is the unit impulse at j
    return F.interpolate(eye, size=(n_out, n_in), mode="bilinear", antialias=True, align_corners=align_corners)[0, 0]


def _resize_antialiased(g, x, output_size, align_corners, scale_factors):
    """Symbolic of aten::_upsample_bilinear2d_aa: A @ x @ B^T with constant A [h', h] and B [w', w] (the
    input's spatial size is fixed in an exported image graph; only the batch varies)."""
    # lazy: the exporter's internals, needed only while exporting
    from torch.onnx import symbolic_helper as sh

    size = sh._maybe_get_const(output_size, "is")
    align = bool(sh._maybe_get_const(align_corners, "b"))
    h, w = (sh._get_tensor_sizes(x) or [None] * 4)[2:]
    if h is None or w is None or not isinstance(size, (list, tuple)):
        raise OnnxExportError("antialiased resizing is exported only from a fixed image size to a fixed size")
    a = g.op("Constant", value_t=_axis_matrix(h, size[0], align))
    bt = g.op("Constant", value_t=_axis_matrix(w, size[1], align).T.contiguous())
    return g.op("MatMul", g.op("MatMul", a, x), bt)  # [B, C, h', w] then [B, C, h', w']


@contextlib.contextmanager
def _exporting():
    """What every export runs under: no autograd (inference_mode off: the exporter needs normal tensors),
    the exporter's notes silenced (deprecation, constant folding skipped: nothing a user can act on; the
    comparison with PyTorch guards the result), transformer fast path off, the resize symbolic on."""
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.onnx.register_custom_op_symbolic("aten::_upsample_bilinear2d_aa", _resize_antialiased, OPSET)
    try:
        torch.backends.mha.set_fastpath_enabled(False)
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
        torch.onnx.unregister_custom_op_symbolic("aten::_upsample_bilinear2d_aa", OPSET)


def export_module(module: nn.Module, args: tuple, path: str | Path, input_names: list[str],
                  output_names: list[str], dynamic_axes: dict) -> Path:
    """``module(*args)`` as an ONNX file at ``path`` (TorchScript-based exporter, opset ``OPSET``), the
    module in eval mode. ``dynamic_axes``: which axes of each input/output vary (the batch, a length)."""
    module.eval()  # the exporter sets eval and then restores the mode it found: eval stays eval
    with _exporting():
        torch.onnx.export(module, args, str(path), dynamo=False, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes, opset_version=OPSET)
    _drop_branch_output_shapes(path)
    return Path(path)


def _drop_branch_output_shapes(path: str | Path) -> int:
    """Remove the shapes the exporter declares on the outputs of If branches; how many it removed.

    A ``scatter_reduce`` into a tensor whose rank the TorchScript exporter does not track (the sparse
    text rows: zeros [B, V] from the batch size) is exported behind an If that squeezes a scalar case,
    and the branch outputs are declared rank 1 ({-1}) while the values are [B, V]. Every run of such a
    graph then made ONNX Runtime print ``VerifyOutputSizes ... Expected shape from model of {-1} does not
    match actual shape of {2,30522}``, in any user's session, not only ours. The values are right (each
    export is compared with PyTorch); the declaration was wrong. Without it, ONNX Runtime infers the
    shapes itself, and correctly. Shapes elsewhere in the graph are kept."""
    import onnx  # optional: the onnx extra (checked by missing_runtime before any export)

    model = onnx.load(str(path))
    dropped = 0

    def visit(graph) -> None:
        nonlocal dropped
        for node in graph.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    if node.op_type == "If":
                        for out in sub.output:
                            if out.type.tensor_type.HasField("shape"):
                                out.type.tensor_type.ClearField("shape")
                                dropped += 1
                    visit(sub)

    visit(model.graph)
    if dropped:
        onnx.save(model, str(path))
    return dropped


def session(path: str | Path, threads: int | None = None):
    """An ONNX Runtime session on the CPU for ``path``: as many threads as torch uses, no spin-waiting
    (DataLoader workers decode on the same cores and spinning threads take their time; measured equal
    or faster wall time with less CPU, docs/scale.md)."""
    import onnxruntime as ort  # optional: the onnx extra

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads or torch.get_num_threads())
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # errors only: what ONNX Runtime warns of here is about its own choices (thread pools, providers), not
    # the values, which the comparison with PyTorch checks. (The shape warning every session printed on
    # the text graphs is fixed in the graph itself: _drop_branch_output_shapes.)
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def quantize_int8(src: str | Path, dst: str | Path) -> Path:
    """ONNX Runtime's dynamic quantisation of ``src`` into ``dst``: int8 weights, activations quantised
    per batch at run time (no calibration data)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # optional: the onnx extra

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser logs a warning per tensor whose type it cannot infer
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=INT8_OPS)
    finally:
        root.setLevel(level)
    return Path(dst)


def missing_runtime() -> str | None:
    """Why ONNX export cannot run here (onnx or onnxruntime not installed), or None."""
    try:
        import onnx  # noqa: F401  # optional: the exporter needs it
        import onnxruntime  # noqa: F401  # optional: the runtime
    except ImportError as e:
        return str(e)
    return None


@dataclass
class OnnxExport:
    """What ``export_onnx`` wrote: the folder, its files and the largest |ONNX - PyTorch| of each side."""

    out: Path
    files: list[Path]
    max_diff: dict[str, float] = field(default_factory=dict)


def probe_images(size: int, n: int = 5, seed: int = 0) -> list[Image.Image]:
    """Images unlike the export's examples: random colours at several sizes and aspect ratios."""
    rng = np.random.default_rng(seed)
    shapes = [(size, size), (size // 2 + 1, size), (size, 3 * size // 2), (7, 5), (2 * size, size)]
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in shapes[:n]]


def _dense(rows) -> np.ndarray:
    return np.asarray(rows.to_dense() if hasattr(rows, "to_dense") else rows, np.float32)


def _check(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> float:
    if got.shape != want.shape:
        raise OnnxExportError(f"the ONNX {name} encoder returns shape {got.shape}, PyTorch {want.shape}")
    diff = float(np.abs(got - want).max()) if got.size else 0.0
    if not diff <= tol:
        raise OnnxExportError(f"the ONNX {name} encoder differs from PyTorch by {diff:.2e} > {tol:g}")
    return diff


def _export_side(name: str, module: nn.Module, args: tuple, path: Path, inputs: list[str], axes: dict,
                 family: str) -> None:
    try:
        export_module(module, args, path, inputs, ["vector"], {**axes, "vector": {0: "batch"}})
    except OnnxExportError:
        raise
    except Exception as e:  # an operator without an ONNX symbolic, a tracer failure: the exporter's words
        raise OnnxExportError(f"the {name} encoder of this {family} model cannot be exported to ONNX: "
                              f"{' '.join(str(e).split())[:300]}") from e


def export_onnx(model, out: str | Path, *, source: str | Path | None = None, int8: bool = False,
                tol: float = DEFAULT_TOL) -> OnnxExport:
    """Write ``model``'s image and text encoders as ONNX files into the folder ``out`` (module doc), after
    checking each against ``encode_image`` / ``encode_text`` to ``tol``. ``out`` is replaced atomically
    only when it is new, empty or a previous export (``source``: the model's own folder, which ``out``
    must neither be, hold nor lie in); nothing is left behind when a check fails."""
    missing = missing_runtime()
    if missing:
        raise OnnxExportError(f"ONNX export needs onnx and onnxruntime (pip install 'tokenspace[onnx]'): {missing}")
    if model.device.type != "cpu":
        raise ValueError(f"ONNX export runs on the CPU; the model is on {model.device} (load it on the CPU)")
    out = Path(out)
    check_out(out, source, fmt=MARKER_FORMAT, command="export-onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    model.eval()
    tower = model.image_tower
    S = tower.image_size
    result = OnnxExport(out, [])
    tmp = temp_folder(out)
    try:
        # examples: batch 2 (the checks use 5: a batch size baked into the graph would show)
        _export_side("image", ImageEncoder(model), (model.preprocess(probe_images(S, 2, seed=1)),),
                     tmp / IMAGE_FILE, ["pixels"], {"pixels": {0: "batch"}}, model.family)
        ids, mask = model.tokenize(["a photo", "a red dog on a ball"])
        _export_side("text", TextEncoder(model), (ids, mask), tmp / TEXT_FILE, ["input_ids", "attention_mask"],
                     {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"}},
                     model.family)
        images = probe_images(S)
        got = session(tmp / IMAGE_FILE).run(None, {"pixels": model.preprocess(images).numpy()})[0]
        result.max_diff["image"] = _check("image", got, _dense(model.encode_image(images)), tol)
        text = session(tmp / TEXT_FILE)
        diffs = []
        for texts in (PROBE_TEXTS, PROBE_TEXTS[:1]):  # two lengths, two batch sizes
            ids, mask = model.tokenize(list(texts))
            got = text.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
            diffs.append(_check("text", got, _dense(model.encode_text(list(texts))), tol))
        result.max_diff["text"] = max(diffs)
        files = [IMAGE_FILE, TEXT_FILE]
        if int8:
            for f in (IMAGE_FILE, TEXT_FILE):
                files.append(quantize_int8(tmp / f, tmp / f.replace(".onnx", INT8_SUFFIX)).name)
        _write_sidecars(model, tmp, files, result.max_diff, tol)
        if out.exists():
            check_out(out, source, fmt=MARKER_FORMAT, command="export-onnx")  # it may have changed meanwhile
        replace_folder(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # the graphs in the order written (float, then int8), then the files beside them
    result.files = [out / f for f in files] + sorted(p for p in out.iterdir() if p.is_file() and p.name not in files)
    return result


def _write_sidecars(model, folder: Path, files: list[str], max_diff: dict, tol: float) -> None:
    """The tokenizer, the names of the output dimensions and the record of how to feed the graphs."""
    tower = model.image_tower
    write_tokenizer_files(folder, model.tokenizer.vocab, model.config.max_text_len)
    model.tokenizer.vocab.save(folder / "vocab.txt")  # the tokenizer's (BertTokenizer's slow path reads it)
    (folder / DIMENSIONS_FILE).write_text("".join(f"{t}\n" for t in model.vocab.tokens), encoding="utf-8")
    record = {
        "format": MARKER_FORMAT, "model": model.config.name, "family": model.family, "opset": OPSET,
        "files": files, "similarity": model.similarity_fn_name, "sparse": model.sparse, "dim": len(model.vocab),
        "image": {"file": IMAGE_FILE, "input": "pixels", "shape": ["batch", 3, tower.image_size, tower.image_size],
                  "preprocess": "letterbox on white to image_size (PIL bicubic), then (x - mean) / std on 0..255",
                  "image_size": tower.image_size, "mean": list(map(float, tower.pixel_mean)),
                  "std": list(map(float, tower.pixel_std)), "top_n": model.image_top_n},
        "text": {"file": TEXT_FILE, "inputs": ["input_ids", "attention_mask"], "tokenizer": "tokenizer.json",
                 "max_length": model.config.max_text_len, "top_n": model.text_top_n},
        "output": {"name": "vector", "shape": ["batch", len(model.vocab)], "dimensions": DIMENSIONS_FILE},
        "checked": {"tol": tol, "max_abs_diff": max_diff},
    }
    (folder / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


__all__ = ["DEFAULT_TOL", "IMAGE_FILE", "ImageEncoder", "OnnxExport", "OnnxExportError", "TEXT_FILE", "TextEncoder",
           "export_module", "export_onnx", "missing_runtime", "quantize_int8", "session"]
