"""tokenspace's maintained benchmarks, each run from the repository root as a module:

    python -m benchmarks.engines speed --corpus 100k
    python -m benchmarks.engines cost-curve --help

Running them as modules of this package is what lets them import each other and ``benchmarks.common``
(the corpus, the run record, JSON writing, timing) without touching sys.path. Every maintained run
writes JSON under benchmarks/results/ that starts with its run record: date, commit, machine, command.
One-shot ablations live in experiments/ (one config per experiment, one runner); docs/benchmarks.md
has the current tables and docs/method.md how they are measured.
"""
