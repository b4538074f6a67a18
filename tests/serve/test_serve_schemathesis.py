"""Schemathesis's own command line, every check and every phase, against a real server.

`schemathesis run URL/openapi.json --checks all` with bounded examples and a fixed seed: the coverage
phase sends the boundary and type-mutated requests (``"k": "10"``, an empty upload, a text of one
separator character) that the hypothesis-only fuzz test (test_serve_fuzz.py) does not reach.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install schemathesis)")

# per operation: the run takes ~30 s on two cores; TOKENSPACE_FUZZ_EXAMPLES=500 for a longer hunt
MAX_EXAMPLES = int(os.environ.get("TOKENSPACE_FUZZ_EXAMPLES", "30"))
SEED = 17


def schemathesis_config(spec: dict) -> str:
    """schemathesis.toml: schema-valid data may get a 2xx or an error its operation documents (a token
    the vocabulary lacks: 400; an id not indexed: 404; bytes that are not an image: 415), nothing else."""
    lines = []
    for methods in spec["paths"].values():
        for op in methods.values():
            refusals = sorted(c for c in op.get("responses", {}) if c.startswith("4") and c != "422")
            lines += ["[[operations]]", f"include-operation-id = {json.dumps(op['operationId'])}",
                      "[operations.checks.positive_data_acceptance]",
                      f"expected-statuses = {json.dumps(['2xx', *refusals])}", ""]
    return "\n".join(lines)


def test_schemathesis_all_checks_all_phases_report_no_failure(live_server, client, tmp_path):
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    if cli is None:
        pytest.skip("the schemathesis command is not on PATH")
    config = tmp_path / "schemathesis.toml"
    config.write_text(schemathesis_config(client.get("/openapi.json").json()))
    cmd = [cli, "--config-file", str(config), "--no-color", "run", f"http://127.0.0.1:{live_server}/openapi.json",
           "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful", "--max-examples", str(MAX_EXAMPLES),
           "--seed", str(SEED), "--workers", "1", "--generation-database", "none",
           "--report", "junit", "--report-dir", str(tmp_path / "report")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    print(run.stdout[-2500:])  # the summary, shown with -s
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Failures:" not in run.stdout, run.stdout[-6000:]
