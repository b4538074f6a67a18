"""Data: the JSONL manifest, image loading, readers (COCO, Karpathy, image folders) and the builders
that turn the offline assets into manifests: emoji (every artist), named icon sets (Iconify),
OpenClipart, and the photo test sets (Fashion-MNIST, MNIST, scikit-image samples). docs/data.md."""
from tokenspace.data.build import build_manifests
from tokenspace.data.coco import read_coco_captions, read_karpathy
from tokenspace.data.folders import read_image_folder
from tokenspace.data.images import ImageLoadError, LoadResult, load_image, load_images
from tokenspace.data.manifest import (
    ManifestError,
    Record,
    drop_empty_texts,
    read_manifest,
    split_counts,
    write_manifest,
)

__all__ = [
    "ImageLoadError",
    "LoadResult",
    "ManifestError",
    "Record",
    "build_manifests",
    "drop_empty_texts",
    "load_image",
    "load_images",
    "read_coco_captions",
    "read_image_folder",
    "read_karpathy",
    "read_manifest",
    "split_counts",
    "write_manifest",
]
