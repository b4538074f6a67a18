"""Turn a search_speed report (dict) into a console table and a markdown section of docs/benchmarks.md."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

BASELINE = "tokenspace"  # ratios are tokenspace's exact setting over each peer row, same run, same mode


def _rows(report):
    for res in report["results"]:
        if "error" in res:
            yield res, None
        else:
            for s in res["settings"]:
                yield res, s


def _mb(b):
    return "-" if b is None else f"{b / 2**20:,.0f}"


def _load(res):
    load = res.get("load_avg_1min")
    return "-" if not load else f"{load[0]:.1f}→{load[1]:.1f}"


def _baseline(report):
    for res, s in _rows(report):
        if s is not None and res["peer"] == BASELINE and s["setting"].startswith("exact"):
            return s
    return None


def markdown_table(report) -> str:
    base = _baseline(report)
    head = ("| engine | setting | 1-thread QPS | mean ms | p99 ms | recall@10 | batched QPS (2 thr) | "
            "batch recall@10 | build s | index MB | index / raw CSR | RSS delta MB | tokenspace-exact speed-up "
            "(1 thr / batched) | load avg (start→end) |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for res, s in _rows(report):
        if s is None:
            lines.append(f"| {res['peer']} | **failed** | {res['error'].replace('|', '/')} |" + " |" * 11)
            continue
        raw = res.get("raw_csr_bytes")
        ratio = "-" if not res.get("index_bytes") or not raw else f"{res['index_bytes'] / raw:.2f}"
        speed = "-"
        if base is not None:
            speed = f"{base['single_qps'] / s['single_qps']:.2f}x / {base['batch_qps'] / s['batch_qps']:.2f}x"
        lines.append(
            f"| {res['peer']} | {s['setting']} | {s['single_qps']:,.1f} | {s['single_mean_ms']:.2f} | "
            f"{s['single_p99_ms']:.2f} | {s['single_recall']:.3f} | {s['batch_qps']:,.1f} | {s['batch_recall']:.3f} | "
            f"{res['build_s']:.1f} | {_mb(res.get('index_bytes'))} | {ratio} | {_mb(res.get('rss_delta_bytes'))} | "
            f"{speed} | {_load(res)} |")
    notes = [f"- **{res['peer']}**: {res['notes']}" for res in report["results"] if res.get("notes")]
    return "\n".join(lines) + ("\n\nNotes per engine:\n" + "\n".join(notes) if notes else "")


def print_table(report) -> None:
    print(f"\n{report['corpus']} ({report['n_docs']:,} docs), k={report['k']}")
    fmt = "{:<18} {:<22} {:>10} {:>8} {:>8} {:>7} {:>11} {:>7} {:>8} {:>9}"
    print(fmt.format("engine", "setting", "QPS(1thr)", "mean ms", "p99 ms", "R@10", "QPS(batch)", "R@10", "build s",
                     "index MB"))
    for res, s in _rows(report):
        if s is None:
            print(f"{res['peer']:<18} FAILED: {res['error']}")
            continue
        print(fmt.format(res["peer"], s["setting"][:22], f"{s['single_qps']:.1f}", f"{s['single_mean_ms']:.2f}",
                         f"{s['single_p99_ms']:.2f}", f"{s['single_recall']:.3f}", f"{s['batch_qps']:.1f}",
                         f"{s['batch_recall']:.3f}", f"{res['build_s']:.1f}", _mb(res.get("index_bytes"))))


HEADER = """# Benchmarks

Search speed of the embedded `InvertedIndex` against the engines a user could pick instead, measured
side by side in one run by `benchmarks/search_speed.py` (`make bench`). Sections below are rewritten
by that script; the text around them is not. How to read them:

- **1-thread QPS / mean / p99**: queries one at a time, each engine limited to one thread where it has
  a knob (Milvus Lite's server threads cannot be pinned). **Batched QPS**: the 1,000 queries in batches,
  2 threads.
- **recall@10**: overlap with the exact top 10 (scipy), per query, averaged. FAISS runs the 512-d dense
  twin of the corpus, a different task: its recall is against its own exact answer.
- **index MB**: what the engine keeps on disk after its build; **raw CSR** is indptr (int64) + indices
  (int32) + values (float32) of the documents. **RSS delta**: resident memory after the build minus
  before it, with the input already in RAM (process plus child processes).
- **speed-up**: tokenspace's exact setting's QPS over that row's QPS, in the same run and mode.
- **load avg**: the machine's 1-minute load average when the peer started and ended. The machine is
  shared (2 cores, other engineers' jobs): a load well above 2 means every figure of that row is
  slowed by contention, and rows measured under different loads compare only roughly.
"""


def update_docs(path: Path, report, table: str) -> None:
    """Replace (or add) this corpus' section between markers; keep everything else in the file."""
    tag = report["corpus"] + ("-quick" if report.get("single_queries", 1000) < 1000 else "")
    begin, end = f"<!-- search_speed:{tag}:begin -->", f"<!-- search_speed:{tag}:end -->"
    section = (f"{begin}\n## {tag} ({report['n_docs']:,} documents, {report['k']} results)\n\n"
               f"Command: `{report['command']}`  \nDate: {report['date']}  \nMachine: {report['machine']}  \n"
               f"One-at-a-time queries timed: {report['single_queries']}; batched: all queries in batches of "
               f"{report['batch_size']} on {report['threads_batch']} threads.\n\n{table}\n{end}")
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text, flags=re.DOTALL)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def merge(paths: list[Path]) -> dict:
    """Rows of several results JSONs of the same corpus (later files win per peer), in PEERS order."""
    from benchmarks.peers import PEERS

    reports = [json.loads(Path(p).read_text()) for p in paths]
    if len({r["corpus"] for r in reports}) != 1:
        raise ValueError("can only merge results of one corpus")
    rows: dict[str, dict] = {}
    for r in reports:
        for res in r["results"]:
            res.setdefault("run", {"command": r["command"], "date": r["date"]})
            rows[res["peer"]] = res
    out = dict(reports[-1])
    out["results"] = sorted(rows.values(), key=lambda res: list(PEERS).index(res["peer"]))
    out["command"] = "; ".join(dict.fromkeys(res["run"]["command"] for res in out["results"]))
    out["date"] = ", ".join(sorted({res["run"]["date"] for res in out["results"]}))
    return out


def cli(argv=None):
    """python -m benchmarks.engines report A.json B.json --out merged.json [--docs docs/benchmarks.md]"""
    ap = argparse.ArgumentParser(description="merge search_speed results and rewrite the docs table")
    ap.add_argument("inputs", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--docs", type=Path, default=None)
    a = ap.parse_args(argv)
    report = merge(a.inputs)
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    if a.docs:
        update_docs(a.docs, report, markdown_table(report))

