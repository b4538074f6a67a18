import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.skipif(importlib.util.find_spec("open_clip") is None, reason="open_clip_torch not installed")
def test_open_clip_towers_from_a_local_dir(tmp_path):
    # a child process: on CPU-only machines the check stubs torchvision, which must not leak into pytest
    script = Path(__file__).with_name("openclip_check.py")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, check=False,
                       timeout=300, env=env)
    assert "OPENCLIP-OK" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]
