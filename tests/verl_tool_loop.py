"""How verl's tool agent loop writes a multi-turn rollout's messages, for the test that maps
verl's shape to the platform's stored trajectory (tests/integration/test_rollout_shapes.py).

verl's ``verl/tools/schemas.py`` (which imports only pydantic) is loaded from its installed
file. The loop itself (``verl/experimental/agent_loop/tool_agent_loop.py``) and its Hermes
tool parser import torch, ray and verl's GPU stack (installed without its dependencies, see
tests/verl_reward_loop.py), so the steps that build the messages are copied from verl 0.9.1,
Copyright the verl authors, Apache License 2.0 (http://www.apache.org/licenses/LICENSE-2.0):

- ``hermes_extract_tool_calls``: ``HermesToolParser.extract_tool_calls``
  (``verl/experimental/agent_loop/tool_parser.py``), the decoded text given instead of token
  ids and ``FunctionCall`` a plain dict.
- ``build_assistant_message``: ``ToolAgentLoop._build_assistant_message``.
- ``tool_message``: the text-only branch of ``ToolAgentLoop._handle_processing_tools_state``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def verl_schemas() -> ModuleType | None:
    """verl's ``verl/tools/schemas.py``, loaded from its file (None: verl not installed)."""
    found = importlib.util.find_spec("verl")
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(next(iter(found.submodule_search_locations))) / "tools" / "schemas.py"
    spec = importlib.util.spec_from_file_location("verl_tool_schemas", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("verl_tool_schemas", module)
    spec.loader.exec_module(module)
    return module


# --- copied from verl 0.9.1 (Apache License 2.0) ---------------------------------------------

_TOOL_CALL_REGEX = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def hermes_extract_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return text, []
    matches = _TOOL_CALL_REGEX.findall(text)
    function_calls = []
    for match in matches:
        try:
            function_call = json.loads(match)
            name, arguments = function_call["name"], function_call["arguments"]
            function_calls.append(
                {
                    "name": name,
                    "arguments": json.dumps(arguments, ensure_ascii=False),
                    "tool_call_id": None,
                }
            )
        except Exception:
            pass
    content = _TOOL_CALL_REGEX.sub("", text)
    return content, function_calls


def build_assistant_message(  # type: ignore[no-untyped-def]
    content: str, tool_calls_found: list[dict[str, Any]], schemas, max_parallel_calls: int = 1
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if not tool_calls_found:
        return message

    tool_calls = []
    for tool_call in tool_calls_found[:max_parallel_calls]:
        function_call, has_decode_error = (
            schemas.OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
                schemas.OpenAIFunctionParsedSchema(
                    name=tool_call["name"], arguments=tool_call["arguments"]
                )
            )
        )
        if has_decode_error:
            function_dict = {"name": tool_call["name"], "arguments": tool_call["arguments"]}
        else:
            function_dict = function_call.model_dump()
        tool_call_message: dict[str, Any] = {"type": "function", "function": function_dict}
        if tool_call["tool_call_id"] is not None:
            tool_call_message["id"] = tool_call["tool_call_id"]
        tool_calls.append(tool_call_message)
    message["tool_calls"] = tool_calls
    return message


def tool_message(text: str | None, tool_call_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "tool", "content": text or ""}
    if tool_call_id is not None:
        message["tool_call_id"] = tool_call_id
    return message
