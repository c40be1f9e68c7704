"""schemathesis, driven by the app's own OpenAPI schema, finds no server error on any route.

Bounded: a fixed number of generated requests per operation, sent with an admin key to an
app on a real SQLite database holding a rubric, a prompt and a completion.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.requirements import require_module

schemathesis = require_module("schemathesis", "dev")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from tests.api_harness import api_client, bearer  # noqa: E402

EXAMPLES_PER_OPERATION = 40


@pytest.fixture
def api_app(sqlite_url: str) -> Iterator[tuple[Any, str]]:
    with api_client(sqlite_url) as (client, keys):
        seed = [{"prompt_external_id": "api-sea", "text": "Blue.", "external_id": "s-1"}]
        response = client.post("/v1/completions", json=seed, headers=bearer(keys["admin"]))
        assert response.status_code == 200, response.text
        yield client.app, keys["admin"]


@pytest.mark.slow
def test_no_operation_gives_a_server_error(api_app: tuple[Any, str]) -> None:
    app, admin_key = api_app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # every route is in the schema

    failures: dict[str, str] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,  # the same requests on every run: a failure is reproducible
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def check(case: Any) -> None:
            case.call_and_validate(headers=bearer(admin_key), checks=[not_a_server_error])

        try:
            check()
        except Exception as err:  # collect every operation's failure, then report them all
            failures[operation.label] = str(err)[:2000]
    assert not failures, "\n\n".join(f"{label}: {error}" for label, error in failures.items())
    # The key was accepted: requests got past authentication to the routes themselves.
    answered = {
        sample.labels["route"]
        for sample in app.state.rubricsvc.metrics.requests.collect()[0].samples
        if sample.name.endswith("_total") and sample.labels["status"].startswith("2")
    }
    assert len(answered) >= 12, sorted(answered)
