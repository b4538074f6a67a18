"""One-shot ablations: each experiment is a config file here (experiments/<name>.toml: the question, the
command, where its result lies) run by one runner, ``python -m experiments.run <name>``. The code of an
ablation that is more than a setting of a maintained benchmark stays beside its config."""
