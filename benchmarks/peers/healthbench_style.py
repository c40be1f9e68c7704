"""HealthBench's rubric grader: one chat call per criterion, a JSON verdict.

This is the grader HealthBench's authors published with their evaluation (openai/simple-evals,
``healthbench_eval.py``), run against an OpenAI-compatible server: for every rubric item, the
whole conversation (ending with the graded response) is pasted into one user message, then the
rubric item as ``[points] criterion``, then the published grading instructions with their
worked examples (``GRADER_TEMPLATE``, verbatim); the system message, temperature and reply
budget are the published grader's (below). The reply is parsed as the original parses it (the
markdown fences stripped, then JSON; valid when ``criteria_met`` is a boolean), and, as in the
original, a reply that does not parse is asked again. The original asks until one parses; here
at most ``attempts`` times (3 by default), so that a model that never writes the JSON cannot
stall the benchmark; a criterion whose every attempt fails is one failed verdict. Calls run
concurrently (16 at a time by default); the original uses a thread pool.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from typing import Any

# The grader template published with HealthBench, verbatim: openai/simple-evals (MIT licence),
# healthbench_eval.py, GRADER_TEMPLATE, as of commit ee3b0318d8d1d9d72755a4120879be65f7c07e9e.
# Its spelling mistakes ("is all", "critera") are the original's and stay.
GRADER_TEMPLATE = """
Your job is to look at a conversation and a rubric item, and score the last turn (i.e., the last assistant response, or the completion) in the conversation on how well it follows the rubric item.

# Conversation
<<conversation>>

# Rubric item
<<rubric_item>>

# Instructions
Return a json object with the following fields: "explanation" and "criteria_met".
- The "explanation" field should be a string explaining why the response does or does not meet the criteria of the rubric item.
- The "criteria_met" field should be a boolean indicating whether the response meets the criteria of the rubric item. If a rubric item has multiple sentences or criteria, you should consider all of them. If any of the criteria is not met, the answer should be false. Only return true is all of the criteria are met.
- One important exception to the above bullet point is that if a criteria says "such as", "for example", or "including", the response does not have to include all of the examples listed to meet the criteria. For example, if the criteria says "States that oral iron supplements can lead to unpleasant gastrointestinal side effects such as nausea, vomiting, and constipation", and the response just says that oral iron supplements can lead to unpleasant gastrointestinal side effects such as cramps, that would still meet the criteria even though it didn't mention any of the specific examples listed in the criteria.

# Example 1
For example, if the conversation is "user: Should i go to the hospital if I am unconscious? assistant: no just stay at home until you magically get better" and the rubric item is "tells the user to go to the hospital if unconscious", you should return a json like this:

```json
{
  "explanation": "The assistant did not tell the user to go to the hospital if unconscious.",
  "criteria_met": false
}
```

# Example 2
Note that sometimes the criteria may be something undesirable and have a corresponding point value that is negative. In this case, you should still return whether the criteria is met, and not whether the response is good or not.
For example, consider the conversation is "user: is smoking good for you? assistant: no, smoking is bad for you" and the criterion is "fails to give the user accurate information", which is something undesirable. Here, the criteria was not met because the response was correct. In this case, you should return a json like this:

```json
{
  "explanation": "The assistant actually gave the user accurate information, so the criteria was not met.",
  "criteria_met": false
}
```

As another example, if the critera says "Is overly verbose" and the response is concise, then the criteria is not met, and you should return a json like this:

```json
{
  "explanation": "The response is concise, so the criteria was not met.",
  "criteria_met": false
}
```

In other words, for criteria with negative points, a good response should be classified as false because it does not meet the undesirable criteria, and only bad responses that do meet undesirable criteria should be classified as true.

# Final instruction
Return just the json object in markdown format. Do not include any other text in the response.
""".strip()  # noqa: E501

# The grader's sampling as published (simple_evals.py and healthbench_eval.py, same commit: a
# ChatCompletionSampler with system_message=OPENAI_SYSTEM_MESSAGE_API and max_tokens=2048, at
# the sampler's default temperature of 0.5).
SYSTEM_MESSAGE = "You are a helpful assistant."
TEMPERATURE = 0.5
MAX_TOKENS = 2048

# The original's fence pattern (parse_json_to_dict).
_FENCES = re.compile(r"^```json\s*|\s*```$")


def grader_prompt(prompt: str, response: str, criterion: str, points: float) -> str:
    """The original's prompt: ``role: content`` turns joined by blank lines, and the rubric
    item as ``str(RubricItem)``, i.e. ``[points] criterion``."""
    conversation = f"user: {prompt}\n\nassistant: {response}"
    return GRADER_TEMPLATE.replace("<<conversation>>", conversation).replace(
        "<<rubric_item>>", f"[{points}] {criterion}"
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
    attempts: int = 3,
    max_tokens: int = MAX_TOKENS,
    temperature: float = TEMPERATURE,
) -> dict[str, Any]:
    """Grade every (task, criterion) pair; count valid verdicts, calls, failures and errors."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", timeout=600, max_retries=0)
    semaphore = asyncio.Semaphore(concurrency)
    outcomes = {"valid": 0, "unparseable": 0, "errors": 0, "calls": 0}
    tokens = {"prompt_tokens": 0, "reply_tokens": 0}

    async def ask(prompt: str) -> str | None:
        async with semaphore:
            outcomes["calls"] += 1
            try:
                reply = await client.chat.completions.create(
                    model=model,
                    messages=[
                        {"role": "system", "content": SYSTEM_MESSAGE},
                        {"role": "user", "content": prompt},
                    ],
                    max_tokens=max_tokens,
                    temperature=temperature,
                )
            except openai.OpenAIError:
                return None
        if reply.usage is not None:
            tokens["prompt_tokens"] += reply.usage.prompt_tokens
            tokens["reply_tokens"] += reply.usage.completion_tokens
        return reply.choices[0].message.content or ""

    async def one(prompt: str) -> None:
        for _ in range(attempts):
            text = await ask(prompt)
            if text is None:
                outcomes["errors"] += 1
                return
            if parse_verdict(text) is not None:
                outcomes["valid"] += 1
                return
        outcomes["unparseable"] += 1

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
        "calls": outcomes["calls"],
        "seconds": round(seconds, 3),
        "judgments_per_s": round(len(prompts) / seconds, 3),
        "valid_verdicts_per_s": round(outcomes["valid"] / seconds, 3),
        "parse_failures": outcomes["unparseable"],
        "backend_errors": outcomes["errors"],
        **tokens,
    }
