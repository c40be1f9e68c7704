"""Demonstrations for a supervised warm start of the deep-research agent: a scripted researcher
answers each training question of the task set (trainer/deepresearch_tasks.py) in the real
environment, and each rollout it keeps becomes one SFT row in the chat template's tool-call
format.

The researcher runs in the loop the policy runs in (``trainer.environments.held_out``: one
environment instance per rollout, reset with the dataset row, the instance's public methods as
tools, each call made as TRL makes it), so every tool result in a demonstration is what the
environment answered. It searches with queries made from the question (all its content words,
a seeded subset of them, one of its clauses, a supporting document's heading, or a key fact in
other words), opens the supporting documents among the results (sometimes an extra result as
well), and writes the task's hand-written full answer, its sentences in the order their
documents were opened. The plan of each demonstration (its queries, one search or two, where an
extra document is opened) is drawn, by seed, from the plans that find every supporting document
within the tool budget; the search that decides it is the environment's own BM25.

A rollout is kept only when the stored rollout (``trainer.environments.rollouts``) holds: no
tool result reported an error, every document its answer cites was opened in it, its gold score
(the ``gold`` rubric's checks, weighted as that rubric weighs them) is at least ``min_gold``,
and, unless allowed otherwise, every key fact is in view: its gold check matches the text of an
opened document as ``open`` showed it (cut to ``result_chars``), so that the answer claims
nothing the researcher did not read.

Each SFT row is ``{"messages", "tools", "provenance"}``: the prompt as training renders it (the
question and instructions, one user message) followed by the generated turns exactly as TRL's
parser returns them (an assistant turn per tool call, ``content: ""`` and ``tool_calls`` with
arguments as a mapping; each result a ``tool`` message named by its tool; the answer), the
tools' JSON schemas (a JSON string: what ``apply_chat_template`` makes of the environment's
methods) and where it came from. Rendered with the policy's tool chat template
(trainer/environments/chat_template.py), a row is the token sequence a GRPO rollout of the
same calls is made of. Load the file with ``datasets.load_dataset("json", ...)``, which keeps
each call's arguments as written (``Dataset.from_list`` merges the calls' argument keys into
one struct and adds ``null`` arguments). ``--completions PATH`` also writes each rollout as
``rubricsvc completions add`` stores a completion (text, trajectory, opened documents).

``python -m trainer.demonstrations`` writes examples/deepresearch/demonstrations.jsonl.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rubricsvc.judging.readers.checks import run_check
from rubricsvc.judging.readers.citations import extract_citations
from trainer.deepresearch_tasks import DeepResearchTask, gold_score, load_tasks, plain
from trainer.environments.deepresearch import OPEN, SEARCH, Corpus, DeepResearchSettings
from trainer.overopt import Split

SOURCE = "demonstrations"
DEFAULT_CONFIG = Path("examples/deepresearch/train.yaml")
DEFAULT_OUT = Path("examples/deepresearch/demonstrations.jsonl")

# Words of a question that name nothing to search for. Python's keywords are not among them
# (``in``, ``is``, ``and``, ``for``, ``with`` are what some questions are about).
_FUNCTION_WORDS = """a an the what which who whom whose when where why how does do did done doing
    be been being are was were has have had its it this that these those there their them they
    than then so such some any each every may might can could should would will shall must about
    after before between by into of on onto to up down out over under again also only very just
    own same other both either neither i you we he she his her our your my me us python happens
    happen make makes made mean means use used using get gets give gives"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())
# How a query was made (provenance): every content word of the question, a seeded subset of
# them, one clause of the question, a supporting document's heading, a key fact's words.
QUESTION, KEYWORDS, CLAUSE, HEADING, FACT = "question", "keywords", "clause", "heading", "fact"
# A plan's shape: one search; two searches, each followed by its opens; two searches, then the
# opens. An extra open (a listed document that supports nothing) comes first or last.
ONE_SEARCH, INTERLEAVED, SEARCHES_FIRST = "one-search", "interleaved", "searches-first"
EXTRA_FIRST, EXTRA_LAST = "first", "last"

# Plans tried per demonstration wanted, at most.
ATTEMPTS_PER_DEMONSTRATION = 3

_LISTED = re.compile(r"^\[([^\]]+)\] ", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Straight and typographic quotes, as the corpus's headings have them.
_QUOTES = re.compile('["\u201c\u201d\u2018\u2019]')


@dataclass(frozen=True)
class Query:
    text: str
    kind: str


@dataclass(frozen=True)
class Plan:
    """What one demonstration does: its searches and the order of its calls."""

    queries: tuple[Query, ...]
    shape: str
    extra: str | None = None  # EXTRA_FIRST, EXTRA_LAST or None: no extra document opened

    @property
    def key(self) -> str:
        return self.shape if self.extra is None else f"{self.shape}+extra-{self.extra}"


@dataclass
class Demonstration:
    """A kept rollout: the prompt and generated messages, and where they came from."""

    task: DeepResearchTask
    seed: int
    index: int  # of this question's demonstrations
    plan: Plan
    prompt: list[dict[str, Any]]
    generated: list[dict[str, Any]]
    text: str  # the final answer
    trajectory: list[dict[str, Any]]  # as stored
    documents: list[dict[str, Any]]  # opened, as stored
    gold_met: list[bool]
    gold_score: float
    facts_in_view: list[bool]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def opened(self) -> list[str]:
        return [str(d["label"]) for d in self.documents]

    @property
    def cited(self) -> list[str]:
        return list(extract_citations(self.text).cited_labels)

    def provenance(self) -> dict[str, Any]:
        return {
            "prompt_id": self.task.id,
            "split": self.task.split.value,
            "seed": self.seed,
            "index": self.index,
            "plan": self.plan.key,
            "queries": [q.text for q in self.plan.queries],
            "query_kinds": [q.kind for q in self.plan.queries],
            "opened": self.opened,
            "cited": self.cited,
            "supporting": list(self.task.documents),
            "gold_score": self.gold_score,
            "gold_met": self.gold_met,
            "facts_in_view": self.facts_in_view,
            "environment": self.settings,
            "source": SOURCE,
        }

    def sft_row(self, tool_schemas: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {
            "messages": self.prompt + self.generated,
            "tools": json.dumps(list(tool_schemas)),
            "provenance": self.provenance(),
        }

    def completion_record(self) -> dict[str, Any]:
        """The rollout as ``rubricsvc completions add`` takes it (as a training rollout)."""
        record: dict[str, Any] = {
            "external_id": f"{SOURCE}/s{self.seed}/{self.task.id}/{self.index}",
            "prompt_external_id": self.task.id,
            "source": SOURCE,
            "text": self.text,
            "trajectory": self.trajectory,
            "metadata": self.provenance(),
        }
        if self.documents:
            record["documents"] = self.documents
        return record


# --- queries and plans ----------------------------------------------------------------------


def content_words(text: str) -> list[str]:
    """The words of ``text`` worth searching for, in order, each once."""
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)
    kept = [w for w in words if len(w.strip("_")) > 1 and w.lower() not in FUNCTION_WORDS]
    return list(dict.fromkeys(kept))


@cache
def search_stopwords() -> frozenset[str]:
    """The words the environment's search leaves out of a query (bm25s's English list)."""
    from rubricsvc.bm25 import import_bm25s

    return frozenset(import_bm25s().stopwords.STOPWORDS_EN)


def clauses(question: str) -> list[str]:
    """The question's parts: split at question marks, semicolons and ", and"."""
    parts = re.split(r"\?|;|,\s+and\s+|\s+and\s+(?=what|which|how|when|where|why|who)\b", question)
    return [p.strip() for p in parts if p.strip()]


def heading(text: str) -> str:
    """A document's heading (its first line), without quotes: 'The break statement'."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return " ".join(_QUOTES.sub("", first).split())


def fact_words(fact: str) -> str:
    return re.sub(r"^(Says that|Says|Names)\s+", "", fact).strip()


def query_formulations(
    task: DeepResearchTask, corpus: Corpus, ids: dict[str, str], rng: random.Random
) -> list[Query]:
    """Every query the researcher may search ``task`` with, each text once."""
    words = content_words(task.question)
    queries = [Query(" ".join(words), QUESTION)]
    # A subset is drawn from the words the search reads (bm25s drops English stopwords, some of
    # them Python keywords: "for", "in", "is"), so that no subset is all stopwords.
    searched = [w for w in words if w.lower() not in search_stopwords()]
    for size in (2, 3, 4):
        if len(searched) > size:
            picked = sorted(rng.sample(range(len(searched)), size))
            queries.append(Query(" ".join(searched[i] for i in picked), KEYWORDS))
    queries += [Query(" ".join(content_words(c)), CLAUSE) for c in clauses(task.question)]
    queries += [Query(heading(corpus.by_id[ids[t]].text), HEADING) for t in task.documents]
    queries += [Query(" ".join(content_words(fact_words(f.text))), FACT) for f in task.facts]
    unique: dict[str, Query] = {}
    for query in queries:
        if query.text and query.text.lower() not in unique:
            unique[query.text.lower()] = query
    return list(unique.values())


def feasible_plans(
    task: DeepResearchTask,
    corpus: Corpus,
    ids: dict[str, str],
    settings: DeepResearchSettings,
    queries: Sequence[Query],
) -> list[Plan]:
    """The plans that list every supporting document (in the environment's own search) within
    the tool budget, in a fixed order."""
    wanted = {ids[t] for t in task.documents}
    listed = {q: [d.id for d in corpus.search(q.text, settings.search_results)] for q in queries}
    budget = settings.tool_budget
    plans: list[Plan] = []
    for query in queries:
        found = listed[query]
        if not wanted <= set(found) or 1 + len(wanted) > budget:
            continue
        plans.append(Plan((query,), ONE_SEARCH))
        if any(d not in wanted for d in found) and 2 + len(wanted) <= budget:
            plans += [Plan((query,), ONE_SEARCH, e) for e in (EXTRA_FIRST, EXTRA_LAST)]
    if 2 + len(wanted) > budget:
        return plans
    for first in queries:
        head = wanted & set(listed[first])
        if not head or head == wanted:
            continue
        for second in queries:
            if second != first and wanted - head <= set(listed[second]):
                plans += [Plan((first, second), s) for s in (INTERLEAVED, SEARCHES_FIRST)]
    return plans


def chosen_plans(plans: Sequence[Plan], count: int, rng: random.Random) -> list[Plan]:
    """``count`` plans, varied: the shapes taken in turn (in a seeded order), and within a
    shape the first plan (in a seeded order) whose queries none chosen so far has used."""
    by_shape: dict[str, list[Plan]] = {}
    for plan in rng.sample(list(plans), len(plans)):
        by_shape.setdefault(plan.key, []).append(plan)
    shapes = sorted(by_shape)
    rng.shuffle(shapes)
    chosen: list[Plan] = []
    used: set[str] = set()
    while len(chosen) < count and any(by_shape.values()):
        for shape in shapes:
            group = by_shape[shape]
            if not group or len(chosen) >= count:
                continue
            fresh = [p for p in group if not {q.text for q in p.queries} & used]
            plan = (fresh or group)[0]
            group.remove(plan)
            chosen.append(plan)
            used |= {q.text for q in plan.queries}
    return chosen


# --- the researcher ---------------------------------------------------------------------------

Reply = dict[str, Any]


def tool_call(name: str, **arguments: Any) -> Reply:
    """An assistant turn making one call, as TRL's parser returns it."""
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def listed_ids(result: str) -> list[str]:
    """The document ids a search result lists, best first."""
    return _LISTED.findall(result)


def research(
    plan: Plan, wanted: Sequence[str], answer: Callable[[list[str]], str]
) -> Generator[Reply, str, None]:
    """The researcher's turns for ``plan``: each tool result is sent in, the next turn comes
    out; the documents it opens are read off the results it got, not known beforehand."""
    opened: list[str] = []
    listed: list[str] = []

    def to_open(ids: Sequence[str]) -> list[str]:
        return [d for d in ids if d in wanted and d not in opened]

    def extra(ids: Sequence[str]) -> list[str]:
        others = [d for d in ids if d not in wanted and d not in opened]
        return others[:1]

    if plan.shape == SEARCHES_FIRST:
        for query in plan.queries:
            result = yield tool_call(SEARCH, query=query.text)
            listed += [d for d in listed_ids(result) if d not in listed]
        order = to_open(listed)
    else:
        order = []
        for number, query in enumerate(plan.queries):
            result = yield tool_call(SEARCH, query=query.text)
            found = listed_ids(result)
            listed += [d for d in found if d not in listed]
            docs = to_open(found)
            if number == 0 and plan.extra == EXTRA_FIRST:
                docs = extra(found) + docs
            for doc_id in docs:
                yield tool_call(OPEN, doc_id=doc_id)
                opened.append(doc_id)
        if plan.extra == EXTRA_LAST:
            order = extra(listed)
    for doc_id in order:
        yield tool_call(OPEN, doc_id=doc_id)
        opened.append(doc_id)
    yield {"role": "assistant", "content": answer(opened)}


class ScriptedTurns:
    """``research`` as the policy's turns (``trainer.environments.held_out.Turn``): each call
    gets the conversation so far and gives the next reply; None once the script is done."""

    def __init__(self, script: Generator[Reply, str, None]) -> None:
        self.script = script
        self.started = False

    def __call__(self, conversation: list[dict[str, Any]], tools: Any) -> Reply | None:
        try:
            if not self.started:
                self.started = True
                return next(self.script)
            last = conversation[-1]
            return self.script.send(str(last.get("content", "")))
        except StopIteration:
            return None


def ordered_answer(text: str, opened: Sequence[str]) -> str:
    """``text`` with its sentences grouped by the first document each cites (a sentence that
    cites none stays with the one before it), the groups in the order ``opened`` lists them."""
    groups: list[tuple[str | None, list[str]]] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        labels = extract_citations(sentence).cited_labels
        if labels or not groups:
            groups.append((labels[0] if labels else None, [sentence]))
        else:
            groups[-1][1].append(sentence)
    rank = {doc_id: n for n, doc_id in enumerate(opened)}
    ordered = sorted(groups, key=lambda g: rank.get(g[0] or "", len(rank)))
    return " ".join(s for _, sentences in ordered for s in sentences)


def facts_in_view(task: DeepResearchTask, documents: Sequence[dict[str, Any]]) -> list[bool]:
    """Whether each key fact's gold check matches the text of a document as it was shown."""
    shown = [plain(str(d.get("text", ""))) for d in documents]
    return [
        any(run_check(fact.gold.model_dump(mode="json"), text) for text in shown)
        for fact in task.facts
    ]


# --- running it ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What became of each attempt: the kept demonstrations and why the others were not."""

    kept: list[Demonstration] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    questions_without_plan: list[str] = field(default_factory=list)
    # Questions a key fact of which lies past what ``open`` shows of its documents.
    questions_out_of_view: list[str] = field(default_factory=list)

    def reject(self, why: str) -> None:
        self.rejected[why] = self.rejected.get(why, 0) + 1


def environment_options(config: Path) -> dict[str, Any]:
    """The deep-research environment's settings of a training config (its corpus resolved)."""
    from rubricsvc.errors import ValidationFailed
    from trainer.config import load_config

    loaded = load_config(config)
    if loaded.environment != "deepresearch":
        raise ValidationFailed(f"{config}: not a deepresearch training config")
    return dict(loaded.agent.options)


def attempt(
    task: DeepResearchTask,
    ids: dict[str, str],
    plan: Plan,
    options: dict[str, Any],
    seed: int,
    index: int,
) -> tuple[Demonstration | None, str | None]:
    """One rollout of ``plan`` for ``task`` in a fresh environment instance: the demonstration,
    or why it is not one."""
    import trainer.environments  # noqa: F401  (registers the built-in environments)
    from rubricsvc.environments import find_environment
    from trainer.agent_reward import call_stats
    from trainer.environments.held_out import run_in_environment
    from trainer.rewards import PROMPT_ID_COLUMN

    environment = find_environment("deepresearch")
    instance = environment.factory(options)()
    wanted = [ids[t] for t in task.documents]
    full = task.answers[0].text

    def answer(opened: list[str]) -> str:
        reordered = ordered_answer(full, opened)
        return reordered if all(task.gold_verdicts(reordered, ids)) else full

    prompt = [{"role": "user", "content": task.prompt}]
    row = {"prompt": prompt, PROMPT_ID_COLUMN: task.id}
    turns = ScriptedTurns(research(plan, wanted, answer))
    max_turns = int(options.get("tool_budget", 4)) + 1  # as a run's max_tool_calling_iterations
    generated = run_in_environment(turns, instance, row, prompt, max_turns)
    done = environment.rollout(generated, instance)
    stats = call_stats(done, generated)
    if done.ended_by_error or stats.valid_calls != stats.tool_calls:
        return None, "a tool result reported an error"
    if stats.cited_opened != stats.cited_labels:
        return None, "it cites a document it did not open"
    met = task.gold_verdicts(done.text, ids)
    settings = DeepResearchSettings.model_validate(options).model_dump(mode="json")
    settings["corpus"] = Path(settings["corpus"]).name
    demonstration = Demonstration(
        task=task,
        seed=seed,
        index=index,
        plan=plan,
        prompt=prompt,
        generated=[dict(m) for m in generated],
        text=done.text,
        trajectory=done.trajectory,
        documents=done.documents,
        gold_met=met,
        gold_score=gold_score(task, met, ids),
        facts_in_view=facts_in_view(task, done.documents),
        settings=settings,
    )
    return demonstration, None


def demonstrate(
    tasks: Sequence[DeepResearchTask],
    ids: dict[str, str],
    options: dict[str, Any],
    per_question: int,
    seed: int,
    min_gold: float = 1.0,
    facts_out_of_view: bool = False,
) -> Outcome:
    """Up to ``per_question`` demonstrations of each training question of ``tasks`` (held-out
    questions are never demonstrated), the same for the same arguments."""
    from trainer.environments.deepresearch import load_corpus

    settings = DeepResearchSettings.model_validate(options)
    corpus = load_corpus(settings.corpus)
    outcome = Outcome()
    for task in tasks:
        if task.split != Split.TRAIN:
            continue
        shown = [corpus.by_id[ids[t]] for t in task.documents]
        visible = [{"text": d.text[: settings.result_chars]} for d in shown]
        if not facts_out_of_view and not all(facts_in_view(task, visible)):
            outcome.questions_out_of_view.append(task.id)
            continue
        rng = random.Random(f"{seed}/{task.id}")
        queries = query_formulations(task, corpus, ids, rng)
        plans = chosen_plans(feasible_plans(task, corpus, ids, settings, queries), 10**6, rng)
        if not plans:
            outcome.questions_without_plan.append(task.id)
            continue
        index = 0
        # A question whose answer fails on a few plans fails on all: stop trying.
        for plan in plans[: ATTEMPTS_PER_DEMONSTRATION * per_question]:
            if index >= per_question:
                break
            demonstration, why = attempt(task, ids, plan, options, seed, index)
            if demonstration is not None and demonstration.gold_score < min_gold:
                why = f"gold score below {min_gold}"
            elif demonstration is not None and not (
                facts_out_of_view or all(demonstration.facts_in_view)
            ):
                why = "a key fact is not in the text it was shown"
            if why is not None or demonstration is None:
                outcome.reject(why or "no demonstration")
                continue
            outcome.kept.append(demonstration)
            index += 1
    return outcome


def tool_schemas(options: dict[str, Any]) -> list[dict[str, Any]]:
    """The environment's tools as the chat template is given them: the JSON schema
    ``apply_chat_template`` makes of each method TRL offers, in TRL's order."""
    from transformers.utils import get_json_schema

    import trainer.environments  # noqa: F401  (registers the built-in environments)
    from rubricsvc.environments import find_environment
    from trainer.environments.held_out import environment_tools

    instance = find_environment("deepresearch").factory(options)()
    return [get_json_schema(tool) for tool in environment_tools(instance)]


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n" for row in rows]
    path.write_text("".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m trainer.demonstrations",
        description="Write SFT demonstrations of the deep-research training questions.",
    )
    parser.add_argument("--tasks", type=Path, default=DEFAULT_OUT.with_name("tasks.yaml"))
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="the training config whose environment settings the rollouts use",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--per-question", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-gold", type=float, default=1.0)
    parser.add_argument(
        "--facts-out-of-view",
        action="store_true",
        help="keep demonstrations whose key facts lie past what `open` showed",
    )
    parser.add_argument(
        "--completions", type=Path, help="also write the rollouts for `rubricsvc completions add`"
    )
    args = parser.parse_args(argv)
    tasks, ids = load_tasks(args.tasks, args.tasks.with_name("corpus.jsonl"))
    options = environment_options(args.config)
    outcome = demonstrate(
        tasks.tasks,
        ids,
        options,
        args.per_question,
        args.seed,
        args.min_gold,
        args.facts_out_of_view,
    )
    schemas = tool_schemas(options)
    write_jsonl(args.out, [d.sft_row(schemas) for d in outcome.kept])
    if args.completions is not None:
        write_jsonl(args.completions, [d.completion_record() for d in outcome.kept])
    covered = len({d.task.id for d in outcome.kept})
    training = len(tasks.split(Split.TRAIN))
    print(
        f"wrote {args.out}: {len(outcome.kept)} demonstrations of {covered} of {training} "
        f"training questions"
    )
    for why, count in sorted(outcome.rejected.items()):
        print(f"  not kept: {count} ({why})")
    if outcome.questions_out_of_view:
        print(f"  a key fact past result_chars: {outcome.questions_out_of_view}")
    if outcome.questions_without_plan:
        print(f"  no plan finds every supporting document: {outcome.questions_without_plan}")


if __name__ == "__main__":
    main()
