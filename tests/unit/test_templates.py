"""A template renders exactly what ``string.Template.substitute`` gives for its sections."""

from __future__ import annotations

from string import Template

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.templates import BUNDLED_DIR, PromptTemplate, _Compiled, load_template

NAMES = ["conversation", "response", "question", "reference", "verdict_format", "criteria"]


@pytest.mark.parametrize("path", sorted(BUNDLED_DIR.glob("*.txt")), ids=lambda p: p.stem)
def test_bundled_templates_render_as_substitute_would(path):
    template = load_template(path.stem)
    fields = {name: f"<{name} with $dollar and ${{braces}}>" for name in NAMES}
    wanted = [
        {"role": role, "content": Template(body).safe_substitute(fields)}
        for role, body in template.sections()
    ]
    try:
        chat = template.render(**fields)
    except ValidationFailed:  # a placeholder this test has no value for: substitute fails too
        with pytest.raises(KeyError):
            for _, body in template.sections():
                Template(body).substitute(fields)
        return
    assert chat == wanted


pieces = st.sampled_from(["a", " ", "$$", "$name", "${name}", "${other}", "$other.", "\n", "é$"])


@given(st.lists(pieces, max_size=12), st.text(max_size=8))
def test_compiled_sections_match_substitute(parts, value):
    body = "".join(parts)
    fields = {"name": value, "other": value + "!"}
    try:
        wanted: str | type[Exception] = Template(body).substitute(fields)
    except (KeyError, ValueError) as err:
        wanted = type(err)
    try:
        got: str | type[Exception] = _Compiled.of(body).substitute(fields)
    except (KeyError, ValueError) as err:
        got = type(err)
    assert got == wanted


def test_a_missing_value_names_the_placeholder():
    template = PromptTemplate("t", "### user\nHello ${who}")
    with pytest.raises(ValidationFailed, match=r"no value for \$\{who\}"):
        template.render()
