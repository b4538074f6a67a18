"""Schemathesis against the app's own OpenAPI spec, every check on, at a fixed seed: generated requests
(schema-valid and schema-invalid) must never produce a server error, every response must match a
documented status code and schema, and invalid input must be refused.

A schema-valid request may still be refused for what JSON Schema cannot say: a token string the
model's vocabulary lacks (400), a malformed boolean `where` (400), an id that is not indexed (404), bytes
that are not an image (415) or claim too many pixels (413). So positive_data_acceptance accepts, per
operation, the error statuses that operation documents (and no others: a 422 for schema-valid data
still fails it). The schema is loaded inside the test (not with ``schemathesis.pytest.from_fixture``,
whose lazy fixtures do not work with pytest 9) and each operation is driven by its own strategy.
"""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install schemathesis)")
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

EXAMPLES = 40  # per operation and generation mode
SEED = 17


def documented_refusals(spec: dict) -> list[dict]:
    """Per-operation check settings: schema-valid data may get 2xx or an error the operation documents."""
    ops = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            refusals = sorted(c for c in op.get("responses", {}) if c.startswith("4") and c != "422")
            ops.append({"include-operation-id": op["operationId"],
                        "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", *refusals]}}})
    return ops


def test_api_fuzz(served):
    from tokenspace.serve.app import build_app

    app = build_app(served[0])
    config = SchemathesisConfig.from_dict({"operations": documented_refusals(app.openapi())})
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 7

    for op in operations:
        # invalid input needs something that can be invalid: a body or a query parameter (a bare path
        # string, as in /image/{id}, accepts every string)
        raw = op.definition.raw
        refusable = "requestBody" in raw or any(p["in"] == "query" for p in raw.get("parameters", []))
        modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if refusable else (GenerationMode.POSITIVE,)
        for mode in modes:
            @seed(SEED)
            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def fuzz(case):
                case.call_and_validate()

            fuzz()
