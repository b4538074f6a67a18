"""--model and --device of the commands that run a model. Torch loads when a model does, not with this
module: a lean install (no torch: `pip install tokenspace` without the models extra) searches and
serves an inference-free index through it too."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import tokenspace
from tokenspace.cli.common import CLIError, one_line

MODELS_EXTRA = "pip install 'tokenspace[models]'"


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def load_model(ref: str, device: str = "cpu"):
    """A model folder or a release name (`tokenspace.models.registry.list_releases()`), on ``device``;
    a missing folder is named. A config name is an untrained architecture: refused (library message)."""
    check_model_ref(ref)
    if not has_torch():
        raise CLIError(f"--model {ref}: encoding images needs torch and the encoders ({MODELS_EXTRA})")
    dev = device_named(device)
    model = tokenspace.load(ref)  # torch loads here, not with this module
    return model.to(dev) if dev.type != "cpu" else model


def check_model_ref(ref, option: str = "--model") -> None:
    """A --model that names a missing path or a file is refused in the command's words, before anything
    loads (``Searcher.open`` and ``load_model`` load it)."""
    if ref is None:
        return
    ref = str(ref)
    looks_like_path = os.sep in ref or ref.startswith(".") or Path(ref).suffix in (".json", ".safetensors")
    if looks_like_path and not Path(ref).exists():
        raise CLIError(f"no model at {ref}")
    if Path(ref).is_file() and Path(ref).suffix != ".json":  # a .json is a config: refused below, by name
        raise CLIError(f"{option} {ref} is a file; give a model folder (config.json + model.safetensors) or a release name")


def model_reference(ref: str) -> str:
    """What an index records as its model (collection.json) so that a later command loads the same one
    from any folder: a model folder as its absolute path, a release or config name as the name (as
    ``registry.load`` reads ``ref``: a folder first)."""
    return str(Path(ref).resolve()) if Path(ref).is_dir() else ref


def device_named(name: str):
    """--device as a torch.device that exists here (cpu, cuda, cuda:1, mps); a lean install (no torch)
    has the CPU alone, as the string "cpu"."""
    if not has_torch():
        if name == "cpu":
            return "cpu"
        raise CLIError(f"--device {name}: needs torch ({MODELS_EXTRA})")
    import torch  # start-up: torch, which the model's load imports next anyway

    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise CLIError(f"--device {name}: not a torch device ({one_line(e)})") from None
    available = {"cpu": lambda: True, "cuda": torch.cuda.is_available,
                 "mps": lambda: getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()}
    if not available.get(dev.type, lambda: False)():
        raise CLIError(f"--device {name}: not available on this machine")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise CLIError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev
