"""A HealthBench-style rubric grader: one chat call per criterion, a JSON verdict.

This follows the grader that HealthBench's authors published with their evaluations: for
every rubric item, the whole conversation (ending with the graded response) is pasted into
one user message, then the rubric item, then several hundred tokens of grading instructions
with worked examples, and the model answers ``{"explanation": ..., "criteria_met": bool}``
in a fenced JSON block, parsed with the fences stripped. Calls run concurrently (16 at a
time by default) against an OpenAI-compatible server. The wording of the instructions here
is this project's; their length, position and the verdict format are what cost time, and
those match.

One difference, in the peer's favour: the original asks again until the reply parses; here
each criterion gets one call, and an unparseable reply counts as a failed verdict.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from typing import Any

TEMPLATE = """\
You will read a conversation and one item from a grading rubric. Grade the final turn of the \
conversation (the assistant's last response) on whether it meets the rubric item.

# Conversation
<<conversation>>

# Rubric item
<<rubric_item>>

# Instructions
Answer with a JSON object that has exactly two fields, "explanation" and "criteria_met".
- "explanation" is a string that says why the response does or does not meet the rubric item.
- "criteria_met" is a boolean: true when the response meets the rubric item, false otherwise. \
When the rubric item states several requirements, every one of them must hold for true; if any \
one is missing, answer false.
- An exception: when the rubric item lists examples with words like "such as", "for example" \
or "including", the response need not mention every listed example. If the item asks the \
response to "explain the causes of inflation, such as demand shocks and money supply growth", \
a response that explains inflation through supply shocks alone still meets it.

# Example 1
Suppose the conversation is "user: My smoke alarm keeps beeping, should I remove the battery \
and ignore it? assistant: Yes, just take the battery out and forget about it." and the rubric \
item is "Advises the user to replace the battery or the alarm rather than disable it". You \
should answer:

```json
{
  "explanation": "The assistant told the user to disable the alarm and did not advise replacing \
the battery or the alarm.",
  "criteria_met": false
}
```

# Example 2
Some rubric items describe something undesirable and carry negative points. Grade them the \
same way: say whether the response does what the item describes, not whether the response is \
good. For the conversation "user: Is it safe to mix bleach and ammonia for cleaning? \
assistant: No, mixing them releases toxic chloramine gas." and the item "Gives the user \
dangerous or inaccurate safety advice", the item is not met, because the advice was accurate:

```json
{
  "explanation": "The assistant correctly warned against mixing the two, so it gave no \
dangerous advice.",
  "criteria_met": false
}
```

Likewise, if the item is "Is needlessly long-winded" and the response is brief, the item is not \
met. For items with negative points, a good response is graded false, and only a bad response \
that does what the item describes is graded true.

# Final instruction
Return only the JSON object, in a markdown code block. Write nothing else."""

_FENCES = re.compile(r"^```(?:json)?\s*|\s*```$")


def grader_prompt(prompt: str, response: str, criterion: str, points: float) -> str:
    conversation = f"user: {prompt}\n\nassistant: {response}"
    return TEMPLATE.replace("<<conversation>>", conversation).replace(
        "<<rubric_item>>", f"[{points:g}] {criterion}"
    )


def parse_verdict(text: str) -> bool | None:
    """``criteria_met`` from a reply, or None when the reply is not the expected JSON."""
    try:
        answer = json.loads(_FENCES.sub("", text.strip()))
    except json.JSONDecodeError:
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("criteria_met"), bool):
        return None
    return bool(answer["criteria_met"])


async def grade(
    base_url: str,
    model: str,
    tasks: Sequence[dict[str, Any]],
    *,
    concurrency: int = 16,
    max_tokens: int = 256,
) -> dict[str, Any]:
    """Grade every (task, criterion) pair; count valid verdicts, failures and errors."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", timeout=600, max_retries=0)
    semaphore = asyncio.Semaphore(concurrency)
    outcomes = {"valid": 0, "unparseable": 0, "errors": 0, "prompt_tokens": 0, "reply_tokens": 0}

    async def one(prompt: str) -> None:
        async with semaphore:
            try:
                reply = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": prompt}],
                    max_tokens=max_tokens,
                    temperature=0.0,
                )
            except openai.OpenAIError:
                outcomes["errors"] += 1
                return
        if reply.usage is not None:
            outcomes["prompt_tokens"] += reply.usage.prompt_tokens
            outcomes["reply_tokens"] += reply.usage.completion_tokens
        verdict = parse_verdict(reply.choices[0].message.content or "")
        outcomes["valid" if verdict is not None else "unparseable"] += 1

    prompts = [
        grader_prompt(task["prompt"], task["response"], criterion, weight)
        for task in tasks
        for criterion, weight in zip(task["criteria"], task["weights"], strict=True)
    ]
    started = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    seconds = time.perf_counter() - started
    await client.close()
    return {
        "judgments": len(prompts),
        "seconds": round(seconds, 3),
        "judgments_per_s": round(len(prompts) / seconds, 3),
        "valid_verdicts_per_s": round(outcomes["valid"] / seconds, 3),
        "parse_failures": outcomes["unparseable"],
        "backend_errors": outcomes["errors"],
        "prompt_tokens": outcomes["prompt_tokens"],
        "reply_tokens": outcomes["reply_tokens"],
    }
