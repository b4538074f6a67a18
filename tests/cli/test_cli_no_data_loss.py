"""Commands that write folders lose nothing: export-st refuses a folder that is not its own export (or the
model's), train refuses a folder holding a run unless --resume, a recipe that fails validation writes
nothing, and a damaged model folder is named in the one error line."""
import shutil


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_st_refuses_the_model_folder_and_a_users_folder(world, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(world.model, model)
    before = snapshot(model)
    r = world.run("export-st", model, model)
    assert r.code == 1 and "is the model's own folder" in r.error_line()
    assert snapshot(model) == before
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    r = world.run("export-st", model, precious)
    assert r.code == 1 and f"{precious}: is a non-empty folder that is not a previous export" in r.error_line()
    assert snapshot(precious) == {"thesis.txt": b"years of work"}


def test_a_damaged_model_folder_is_named(world, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(world.model, model)
    (model / "model.safetensors").write_bytes((model / "model.safetensors").read_bytes()[:100])
    r = world.run("export-st", model, tmp_path / "st")
    assert r.code == 1 and f"{model / 'model.safetensors'}: not a readable safetensors file" in r.error_line()
    assert not (tmp_path / "st").exists()


def test_train_refuses_a_folder_holding_a_run_and_a_bad_recipe_writes_nothing(world, tmp_path):
    recipe = tmp_path / "ok.json"  # a .json recipe is accepted (the refusals below come after loading it)
    recipe.write_text(world.recipe.read_text())
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "log.jsonl").write_text('{"step": 1}\n')
    (run / "recipe.json").write_text("the old run's recipe")
    before = snapshot(run)
    r = world.run("train", "--recipe", recipe, "--out", run)
    assert r.code == 1
    assert f"{run} already holds a training run (model/, log.jsonl): pass --resume" in r.error_line()
    assert snapshot(run) == before
    r = world.run("train", "--recipe", recipe, "--out", run, "--set", "batch_size=2.5")
    assert r.code == 1 and "recipe batch_size: expected an integer, not 2.5" in r.error_line()
    assert snapshot(run) == before
