"""Every experiment's TOML holds every parameter its script runs with, and only those: the script reads
them all from the TOML it is given (--plan stops right after, so nothing is measured here), a key it does
not read is refused, and one experiment runs end to end through the runner on a tiny setting, keeping
the TOML it ran beside its JSON."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from experiments import config, run

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted(p.stem for p in (ROOT / "experiments").glob("*.toml"))


@pytest.mark.parametrize("name", NAMES)
def test_every_key_is_read_by_its_script(name, capsys):
    cfg = tomllib.loads((ROOT / "experiments" / f"{name}.toml").read_text())
    assert set(k for k, v in cfg.items() if not isinstance(v, dict)) <= set(config.RUNNER_KEYS)
    assert cfg["module"] == f"experiments.{name}"
    assert config.parameters(cfg), "an experiment's parameters live in tables of its TOML"
    assert run.main([name, "--plan"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out) == config.parameters(cfg)  # resolved as written: the defaults


@pytest.mark.parametrize("name", NAMES)
def test_a_key_the_script_does_not_read_is_refused(name, tmp_path, capsys):
    cfg = tomllib.loads((ROOT / "experiments" / f"{name}.toml").read_text())
    cfg["output" if "output" in cfg else next(iter(config.parameters(cfg)))]["not_a_parameter"] = 1
    cfg["not_a_table"] = {"x": 1}
    (tmp_path / "x.toml").write_text(config.dumps(cfg))
    assert run.main([name, "--config", str(tmp_path / "x.toml"), "--plan"]) == 2
    err = capsys.readouterr().err
    assert "not_a_parameter" in err and "not_a_table" in err, err


def test_set_changes_a_key_the_toml_has_and_refuses_one_it_lacks(capsys):
    assert run.main(["prune_sweep", "--plan", "--set", "sweep.image=[0, 50]"]) == 0
    assert json.loads(capsys.readouterr().out)["sweep"]["image"] == [0, 50]
    with pytest.raises(SystemExit):
        run.main(["prune_sweep", "--plan", "--set", "sweep.imagee=[0, 50]"])
    assert "no such key" in capsys.readouterr().err


def test_dumps_round_trips_every_config():
    for name in NAMES:
        cfg = tomllib.loads((ROOT / "experiments" / f"{name}.toml").read_text())
        assert tomllib.loads(config.dumps(cfg)) == cfg, name


def test_a_tiny_run_end_to_end_keeps_the_toml_beside_its_json(tmp_path):
    """head_memory at toy shapes (a vocabulary of 64, width 8): two child processes, seconds."""
    out = tmp_path / "head_memory.json"
    p = subprocess.run([sys.executable, "-m", "experiments.run", "head_memory", "--set", 'head.shapes=["text:2:9"]',
                        "--set", "head.vocab=64", "--set", "head.width=8", "--set", f"output.json={json.dumps(str(out))}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["arm"], r["positions"]) for r in rows] == [("autograd", 9), ("max_projection", 9)]
    assert rows[0]["checksum"] == pytest.approx(rows[1]["checksum"], rel=1e-5)  # the same head, two ways
    kept = tomllib.loads(out.with_suffix(".toml").read_text())
    assert kept["head"] == {"shapes": ["text:2:9"], "repeats": 1, "vocab": 64, "width": 8}
    assert json.loads(out.with_suffix(".run.json").read_text())["exit"] == 0


def test_documented_commands_name_modules_that_run():
    """Every `python -m benchmarks.X` / `experiments.X` in the docs and the Makefile is a module with an
    entry (a family's subcommand is one it lists), so a moved script leaves no dead command behind."""
    texts = [p.read_text() for p in [ROOT / "Makefile", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    for text in texts:
        for module, sub in re.findall(r"-m ((?:benchmarks|experiments)\.[\w.]+)(?: ([\w-]+))?", text):
            path = ROOT / (module.replace(".", "/") + ".py")
            assert path.exists(), module
            assert "__main__" in path.read_text(), f"{module}: no entry"
            family = sys.modules.get(module) or __import__(module, fromlist=["x"])
            if hasattr(family, "SUBCOMMANDS") and sub and not sub.startswith("-"):
                assert sub in family.SUBCOMMANDS, f"{module} {sub}"


def test_benchmarks_has_at_most_twenty_entries_and_no_sys_path_edit():
    entries = [p for p in (ROOT / "benchmarks").rglob("*.py")
               if re.search(r'__name__ == .__main__.|^def main\(', p.read_text(), re.M)]
    assert len(entries) <= 20, sorted(str(p.relative_to(ROOT)) for p in entries)
    for p in [*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "experiments").rglob("*.py")]:
        assert not re.search(r"sys\.path\.(insert|append)|sys\.path\s*=", p.read_text()), p
