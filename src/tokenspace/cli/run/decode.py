"""tokenspace decode --model DIR --image|--text ...: top tokens of images or texts."""
from __future__ import annotations

from tokenspace.cli.common import UsageError
from tokenspace.cli.model_loading import load_model


def run(args) -> int:
    if not args.image and not args.text:
        raise UsageError("give --image or --text")
    model = load_model(args.model)
    for names, encode in ((args.image, model.encode_image), (args.text, model.encode_text)):
        if not names:
            continue
        for name, row in zip(names, model.decode(encode(names), top_k=args.k)):
            print(f"{name}:")
            print("  " + ", ".join(f"{t} {w:.3f}" for t, w in row))
    return 0
