"""Schemathesis against the app's own OpenAPI spec: generated requests (valid and invalid) must never
produce a server error, and every response must match the documented status codes and schemas.

The schema is loaded inside the test (not with ``schemathesis.pytest.from_fixture``, whose lazy
fixtures do not work with pytest 9) and each operation is driven by its own hypothesis strategy.
"""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install schemathesis)")
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

EXAMPLES = 40  # per operation


def test_api_fuzz(served):
    from tokenspace.serve.app import build_app

    schema = schemathesis.openapi.from_asgi("/openapi.json", build_app(served[0]))
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 7

    for op in operations:
        @given(case=op.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case):
            # schema-valid is not always valid: a token string the schema allows may not be in the model's
            # vocabulary (400), an id may not be indexed (404); positive_data_acceptance would call those bugs
            case.call_and_validate(excluded_checks=[positive_data_acceptance])

        fuzz()
