"""Structured output for drafts: the JSON schema reaches each backend and shapes its reply.

- OpenAI-compatible endpoints get it as ``response_format`` (a real HTTP server on loopback);
- vLLM decodes to it (in process and as a server: tests/integration/test_backend_contract.py,
  which has both engines loaded already);
- the transformers backend decodes to it itself: it writes the JSON skeleton and lets the
  bundled model fill in the values, also when the backend comes kept from a provider.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session

from rubricsvc.backends import backend_from_spec
from rubricsvc.backends.base import BackendError
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.backends.types import Generation, GenerationRequest
from rubricsvc.prompts import get_or_create_prompt
from rubricsvc.rubrics.generation import DraftRequest, generate_rubrics
from rubricsvc.rubrics.repository import resolve_version
from tests.draft_schema import SPEC, draft_chat, fits_the_draft_schema
from tests.fake_openai import FakeOpenAI, chat_completion, serving
from tests.requirements import prepared_model_dir, require_module

DRAFT = {
    "criteria": [
        {"text": "Names a fixed wake time", "category": "essential", "theme": "coverage"},
        {"text": "Blames the user for poor sleep", "category": "pitfall", "theme": "style"},
    ]
}


# -- OpenAI-compatible endpoints ---------------------------------------------------------


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with serving(FakeOpenAI(lambda _body: (200, chat_completion(json.dumps(DRAFT))))) as server:
        yield server


def test_an_openai_endpoint_receives_the_schema(session: Session, endpoint: FakeOpenAI) -> None:
    require_module("openai", "openai")
    spec = SPEC.model_copy(
        update={
            "backend": "openai",
            "model": "served",
            "backend_options": {"base_url": endpoint.base_url, "api_key_env": None},
        }
    )
    prompt = get_or_create_prompt(
        session, [{"role": "user", "content": "Sleep tips?"}], external_id="s"
    )
    report = generate_rubrics(
        session, [DraftRequest(prompt.id)], spec, lambda: backend_from_spec(spec)
    )
    assert [o.status for o in report.outcomes] == ["created"]
    (body,) = endpoint.bodies
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": spec.json_schema(), "strict": True},
    }
    assert (body["model"], body["seed"], body["temperature"]) == ("served", 0, 0.7)
    version = resolve_version(session, "gen/s")
    assert version.origin_detail["generator_model"] == "served"
    assert [c.weight for c in version.criteria] == [5.0, -3.0]


# -- the transformers backend, guided ----------------------------------------------------


@pytest.fixture(scope="module")
def guided() -> Iterator[Any]:
    require_module("torch", "transformers")
    from rubricsvc.backends.transformers import TransformersBackend

    backend = TransformersBackend(prepared_model_dir())
    yield backend
    backend.close()


@pytest.mark.model
def test_guided_replies_fit_the_schema_alone_or_batched(guided: Any) -> None:
    prompts = ["How can I sleep better?", "Write a haiku about autumn.", "Why is the sky blue?"]
    requests = [
        GenerationRequest(
            draft_chat(p), max_tokens=240, temperature=0.7, seed=3, json_schema=SPEC.json_schema()
        )
        for p in prompts
    ]
    batched = guided.generate(requests)
    alone = [guided.generate([request])[0] for request in requests[:2]]
    # Padding the batch changes nothing: each reply is what the request decodes alone.
    assert [r.text for r in batched[:2]] == [r.text for r in alone]
    for reply in batched:
        assert isinstance(reply, Generation)
        if reply.finish_reason == "stop":
            assert fits_the_draft_schema(reply.text), reply.text
        else:  # a value ran past its token limit: cut there, never closed as if complete
            assert reply.finish_reason == "length"
            with pytest.raises(json.JSONDecodeError):
                json.loads(reply.text)
    assert any(r.finish_reason == "stop" for r in batched)


@pytest.mark.model
def test_guided_decoding_refuses_schemas_it_does_not_implement(guided: Any) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    plain = GenerationRequest([{"role": "user", "content": "Say hi."}], max_tokens=3)
    refused, answered = guided.generate(
        [GenerationRequest(draft_chat("Count."), max_tokens=20, json_schema=schema), plain]
    )
    assert isinstance(refused, BackendError) and not refused.retryable
    assert "schema type 'integer' is not supported" in str(refused)
    assert isinstance(answered, Generation)  # a request without a schema decodes as usual


@pytest.mark.model
def test_a_kept_transformers_backend_decodes_to_the_schema(guided: Any) -> None:
    # What drafting gets from a provider is a kept view, not the backend: the schema in the
    # request is all it takes.
    view = BackendProvider(build=lambda _spec: guided).get(SPEC)
    assert view is not guided
    request = GenerationRequest(
        draft_chat("How can I sleep better?"),
        max_tokens=240,
        seed=3,
        json_schema=SPEC.json_schema(),
    )
    (reply,) = view.generate([request])
    assert isinstance(reply, Generation) and reply.text.startswith('{"criteria": [{"text": "')
    if reply.finish_reason == "stop":
        assert fits_the_draft_schema(reply.text), reply.text
