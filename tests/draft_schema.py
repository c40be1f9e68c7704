"""A rubric draft's JSON schema, a chat that asks for one, and a check of a reply against it:
shared by the structured-generation tests of the authoring code and of every backend."""

from __future__ import annotations

import json

from rubricsvc.rubrics.generator import GeneratorSpec

SPEC = GeneratorSpec(min_criteria=2, max_criteria=3, max_tokens=240)


def draft_chat(prompt: str) -> list[dict[str, str]]:
    """The generator's chat asking for a draft of ``prompt``'s rubric."""
    return SPEC.prompt_template().render(
        prompt=prompt, context="", min_criteria="2", max_criteria="3", themes=", ".join(SPEC.themes)
    )


def fits_the_draft_schema(text: str) -> bool:
    """Whether ``text`` is JSON of the shape ``SPEC.json_schema()`` describes."""
    value = json.loads(text)
    if set(value) != {"criteria"} or not 2 <= len(value["criteria"]) <= 3:
        return False
    return all(
        set(item) == {"text", "category", "theme"}
        and isinstance(item["text"], str)
        and item["category"] in {"essential", "important", "optional", "pitfall"}
        and item["theme"] in SPEC.themes
        for item in value["criteria"]
    )
