"""Does Milvus Lite take a file-based bulk import? Issue 18 asked for Milvus at 1M through that path.

    python benchmarks/milvus_bulk_probe.py [--json benchmarks/results/milvus_bulk_probe.json]

Creates a small collection in a fresh Milvus Lite file (the schema MilvusIndex uses: VARCHAR id, sparse
vector), writes 100 rows as a JSON import file (a list of rows, Milvus 2.5's JSON import format) and
asks the server to import it with pymilvus's ``utility.do_bulk_insert``, the client side of Milvus's
Import RPC. Prints and records what the server answers: an import task (then its state) or the error.
``MilvusIndex.build`` inserts through the client in chunks instead; this probe says why.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tokenspace.index.milvus import ID_FIELD, VEC_FIELD  # noqa: E402

ROWS = 100


def probe(folder: Path) -> dict:
    import pymilvus
    from pymilvus import DataType, MilvusClient, connections, utility

    uri = str(folder / "probe.db")
    client = MilvusClient(uri=uri)
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field(VEC_FIELD, DataType.SPARSE_FLOAT_VECTOR)
    client.create_collection("probe", schema=schema)
    rows = [{ID_FIELD: f"d{i}", VEC_FIELD: {str(i % 7): 1.0 + i}} for i in range(ROWS)]
    data_file = folder / "rows.json"
    data_file.write_text(json.dumps(rows))
    out = {"pymilvus": pymilvus.__version__, "milvus_lite": _lite_version(), "rows": ROWS,
           "call": "pymilvus.utility.do_bulk_insert(collection_name, files=[rows.json])"}
    connections.connect(alias="default", uri=uri)
    try:
        task = utility.do_bulk_insert(collection_name="probe", files=[str(data_file)])
    except Exception as e:  # the answer is the result here, whatever its type
        code = getattr(e, "code", None)
        out.update(supported=False, error=type(e).__name__,
                   status=str(code() if callable(code) else code or ""), detail=str(e).strip()[:300])
        return out
    deadline = time.time() + 60
    state = utility.get_bulk_insert_state(task)
    while state.state_name not in ("Completed", "Failed") and time.time() < deadline:
        time.sleep(1)
        state = utility.get_bulk_insert_state(task)
    out.update(supported=state.state_name == "Completed", task=task, state=state.state_name,
               imported_rows=state.row_count)
    return out


def _lite_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("milvus-lite")
    except PackageNotFoundError:
        return "not installed"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    try:
        import pymilvus  # noqa: F401
    except ImportError:
        print("pymilvus is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="milvus-bulk-probe-") as tmp:
        result = probe(Path(tmp))
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
