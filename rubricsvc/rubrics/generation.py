"""Drafting rubrics with an LLM, for one prompt or thousands.

For each prompt: render the generation template (the prompt, its reference answer, evidence
documents), ask the backend for JSON (decoded to the draft's schema: every backend honours
``json_schema``), read the reply strictly (``drafts.parse_draft``), validate the whole rubric,
and store it as a draft version with origin ``llm``. An invalid reply, or a backend failure that
may pass, is tried again with the next seed, up to ``retries`` times (after a backend failure,
with the judges' backoff: ``backends.retry``); a prompt that never yields a valid draft is
reported, and nothing is stored for it. Idempotent: a prompt drafted before with the same
generator hash and the same inputs reuses that version without calling the model.

``generate_rubrics`` takes prompt ids and a backend factory and only flushes (plus the
caller's ``checkpoint`` after each batch), so a worker task can wrap it as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, contains_eager

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.retry import Backoff
from rubricsvc.backends.types import Chat, Generation, GenerationRequest
from rubricsvc.batching import batches
from rubricsvc.documents import DocumentRecord, document_hash, labelled, resolve_documents
from rubricsvc.errors import RubricsvcError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error
from rubricsvc.hashing import content_hash
from rubricsvc.judging.modes import render_conversation
from rubricsvc.models import Origin, Prompt, Rubric, RubricVersion
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.drafts import DraftError, parse_draft
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.generic import with_generic
from rubricsvc.rubrics.schemas import NAME_PATTERN, CriterionSpec, RubricSpec
from rubricsvc.rubrics.versions import prompt_spec_of, save_rubric

DEFAULT_NAME_PREFIX = "gen/"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EvidenceDocument:
    """A document a draft may draw on (a search result for the prompt, a source)."""

    text: str
    url: str | None = None
    title: str | None = None

    @property
    def content_hash(self) -> str:
        return document_hash(self.url, self.title, self.text)


# What the generator reads of one evidence document, at most: its head.
EVIDENCE_CHARS = 4000


@dataclass(frozen=True)
class DraftRequest:
    """One prompt to draft a rubric for, with optional evidence documents (plain texts or
    documents). Each is stored as a document, and each drafted criterion names the one it came
    from (``CriterionSpec.evidence``), so a reviewer can check it."""

    prompt_id: int
    evidence: tuple[str | EvidenceDocument, ...] = ()

    def documents(self) -> tuple[EvidenceDocument, ...]:
        return tuple(
            EvidenceDocument(item) if isinstance(item, str) else item for item in self.evidence
        )


@dataclass(frozen=True)
class GenerationOptions:
    name_prefix: str = DEFAULT_NAME_PREFIX  # rubric name = prefix + the prompt's external id
    with_generic: bool = False  # append the generic criteria library to every draft
    batch_size: int = 16  # requests per backend call (and per checkpoint)


@dataclass
class DraftOutcome:
    """What happened to one prompt: a stored draft, a reused one, or a failure and why."""

    prompt_id: int
    prompt: str  # the prompt's external id, or its id
    # "created", "new version", "unchanged" (the draft equals the rubric's latest version),
    # "reused" (drafted before with the same generator and inputs: no model call) or "failed"
    status: str
    ref: str | None = None
    attempts: int = 0
    error: str | None = None
    # The backend's failure that ended a failed prompt (its last attempt), if it was one.
    backend_error: BackendError | None = field(default=None, repr=False, compare=False)


@dataclass
class GenerationReport:
    generator_hash: str
    outcomes: list[DraftOutcome] = field(default_factory=list)
    backend_requests: int = 0

    def count(self, *statuses: str) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status in statuses)

    def backend_failure(self) -> BackendError | None:
        """The backend's error when every prompt failed because the backend did (nothing was
        drafted, and the fault is the backend's rather than the drafts'), else None."""
        errors = [outcome.backend_error for outcome in self.outcomes]
        if not errors or any(error is None for error in errors):
            return None
        return errors[-1]


@dataclass
class _Job:
    index: int  # position in the caller's list, to report in that order
    prompt: Prompt
    name: str
    key: str  # the generation key: generator hash and inputs
    chat: Chat
    evidence: tuple[str, ...]  # the evidence documents' content hashes, in their numbered order
    attempts: int = 0
    error: str | None = None
    failed_call: BackendError | None = None  # the last attempt's, when the backend failed it


def generate_rubrics(
    session: Session,
    requests: Sequence[DraftRequest],
    spec: GeneratorSpec,
    backend_factory: Callable[[], JudgeBackend],
    options: GenerationOptions | None = None,
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> GenerationReport:
    """Draft a rubric for every requested prompt; see the module docstring."""
    options = options or GenerationOptions()
    report = GenerationReport(generator_hash=spec.config_hash())
    prompts = _stored_prompts(session, [request.prompt_id for request in requests])
    all_jobs = [
        _job(session, spec, report.generator_hash, options, index, request, prompts)
        for index, request in enumerate(requests)
    ]
    drafted = _drafted(session, prompts)
    outcomes: dict[int, DraftOutcome] = {}
    jobs = []
    for job in all_jobs:
        existing = drafted.get((job.prompt.id, job.key))
        if existing is None:
            jobs.append(job)
        else:
            attempts = int(existing.origin_detail.get("attempts", 0))
            outcomes[job.index] = _outcome(job, "reused", existing.ref, attempts=attempts)
    if progress:
        progress(len(outcomes), len(requests))
    if jobs:
        backend = backend_factory()
        try:
            drafter = _Drafter(session, spec, options, backend, report)
            for outcome_index, outcome in drafter.run(jobs, checkpoint):
                outcomes[outcome_index] = outcome
                if progress:
                    progress(len(outcomes), len(requests))
        finally:
            backend.close()
    report.outcomes = [outcomes[index] for index in sorted(outcomes)]
    return report


def rubric_name(prefix: str, prompt: Prompt) -> str:
    """``prefix`` + the prompt's external id (else ``prompt-<hash>``), made a valid rubric name."""
    base = prompt.external_id or f"prompt-{prompt.content_hash[:12]}"
    name = re.sub(r"[^A-Za-z0-9._:/-]+", "-", prefix + base)[:200]
    if not re.match(NAME_PATTERN, name):
        raise ValidationFailed(f"cannot make a rubric name from {prefix!r} and {base!r}")
    return name


def _job(
    session: Session,
    spec: GeneratorSpec,
    generator_hash: str,
    options: GenerationOptions,
    index: int,
    request: DraftRequest,
    prompts: dict[int, Prompt],
) -> _Job:
    prompt = prompts.get(request.prompt_id) or find_prompt(session, prompt_id=request.prompt_id)
    key = content_hash(
        {
            "generator_hash": generator_hash,
            "reference_answer": prompt.reference_answer,
            "evidence": [
                d.text if d.url is None and d.title is None else [d.url, d.title, d.text]
                for d in request.documents()
            ],
            "with_generic": options.with_generic,
            # Numbered documents, each criterion naming its own: another request than before.
            **({"evidence_pointers": True} if request.evidence else {}),
        }
    )
    chat = spec.prompt_template().render(
        prompt=render_conversation(prompt.messages),
        context=_context(prompt.reference_answer, request.documents()),
        min_criteria=str(spec.min_criteria),
        max_criteria=str(spec.max_criteria),
        themes=", ".join(spec.themes),
    )
    name = rubric_name(options.name_prefix, prompt)
    stored = _stored_evidence(session, request.documents())
    return _Job(index, prompt, name, key, chat, evidence=stored)


def _stored_evidence(session: Session, documents: Sequence[EvidenceDocument]) -> tuple[str, ...]:
    """Each evidence document stored (once by its content hash); their hashes, in order."""
    records = [DocumentRecord(url=d.url, title=d.title, text=d.text) for d in documents]
    resolved = resolve_documents(session, labelled(records), "evidence")
    session.flush()
    return tuple(entry.document.content_hash for entry in resolved)


EVIDENCE_INSTRUCTION = (
    '\n\nFor each criterion, also give "evidence": the number of the evidence document it '
    "comes from, or 0 when it comes from none."
)


def _context(reference: str | None, evidence: Sequence[EvidenceDocument]) -> str:
    """The optional material after the prompt: a reference answer and evidence documents."""
    parts = []
    if reference:
        parts.append(
            "\n\nA reference answer that deserves full marks (use it to decide what a good "
            f"response contains; do not mention it in the criteria):\n<reference>\n{reference}\n"
            "</reference>"
        )
    for number, document in enumerate(evidence, start=1):
        head = "".join(
            f"{name}: {value}\n"
            for name, value in (("Title", document.title), ("URL", document.url))
            if value
        )
        parts.append(
            f"\n\nEvidence document {number} (facts a good response may use):\n"
            f"<document>\n{head}{document.text[:EVIDENCE_CHARS]}\n</document>"
        )
    if evidence:
        parts.append(EVIDENCE_INSTRUCTION)
    return "".join(parts)


def _stored_prompts(session: Session, ids: Sequence[int]) -> dict[int, Prompt]:
    """The stored prompts among ``ids``, by id, read a batch at a time."""
    unique = list(dict.fromkeys(ids))
    found: dict[int, Prompt] = {}
    for batch in batches(unique):
        query = select(Prompt).where(Prompt.id.in_(batch))
        found.update((prompt.id, prompt) for prompt in session.scalars(query))
    return found


def _drafted(session: Session, prompts: dict[int, Prompt]) -> dict[tuple[int, str], RubricVersion]:
    """The first version drafted for each of these prompts under each generation key."""
    ids = sorted(prompts)
    found: dict[tuple[int, str], RubricVersion] = {}
    for batch in batches(ids):
        versions = session.scalars(
            select(RubricVersion)
            .join(RubricVersion.rubric)
            .options(contains_eager(RubricVersion.rubric))  # for each version's ref
            .where(Rubric.prompt_id.in_(batch))
            .where(RubricVersion.origin == Origin.LLM)
            .order_by(RubricVersion.id)
        )
        for version in versions:
            key = version.origin_detail.get("generation_key")
            prompt_id = version.rubric.prompt_id
            if prompt_id is not None and isinstance(key, str):
                found.setdefault((prompt_id, key), version)
    return found


def _outcome(job: _Job, status: str, ref: str | None = None, **extra: Any) -> DraftOutcome:
    label = job.prompt.external_id or str(job.prompt.id)
    return DraftOutcome(job.prompt.id, label, status, ref, **extra)


def _gave_up(job: _Job) -> DraftOutcome:
    error = f"no valid draft after {job.attempts} attempt(s); last: {job.error}"
    return _outcome(
        job, "failed", attempts=job.attempts, error=error, backend_error=job.failed_call
    )


class _Drafter:
    """Attempts drafts for a list of jobs against one backend, retrying invalid ones."""

    def __init__(
        self,
        session: Session,
        spec: GeneratorSpec,
        options: GenerationOptions,
        backend: JudgeBackend,
        report: GenerationReport,
    ) -> None:
        self.session = session
        self.spec = spec
        self.options = options
        self.backend = backend
        self.report = report
        self.structured = spec.structured_output
        self.settings = spec.hashed_settings()
        self.backoff = Backoff(spec.retries, spec.retry_backoff)

    def run(
        self, jobs: list[_Job], checkpoint: Callable[[], None] | None
    ) -> Iterator[tuple[int, DraftOutcome]]:
        """Each job's outcome with its index, as it is settled; retries use the next seed."""
        pending = jobs
        for attempt in range(self.spec.retries + 1):
            retry: list[_Job] = []
            for start in range(0, len(pending), self.options.batch_size):
                chunk = pending[start : start + self.options.batch_size]
                settled = list(zip(chunk, self._attempt(chunk, attempt), strict=True))
                if checkpoint:
                    checkpoint()
                for job, outcome in settled:
                    if outcome is None:
                        retry.append(job)
                    else:
                        yield job.index, outcome
            pending = retry
            failed_calls = [job.failed_call for job in pending if job.failed_call]
            if failed_calls and self.backoff.allows(True, attempt):
                self.backoff.wait(attempt, failed_calls)
        for job in pending:
            yield job.index, _gave_up(job)

    def _attempt(self, chunk: list[_Job], attempt: int) -> list[DraftOutcome | None]:
        """One backend call for ``chunk``: an outcome per job, or None to try it again."""
        requests = [self._request(job, attempt) for job in chunk]
        results = self.backend.generate(requests)
        self.report.backend_requests += len(requests)
        return [
            self._settle(job, result, attempt) for job, result in zip(chunk, results, strict=True)
        ]

    def _request(self, job: _Job, attempt: int) -> GenerationRequest:
        schema = self.spec.json_schema(evidence=len(job.evidence)) if self.structured else None
        return GenerationRequest(job.chat, json_schema=schema, **self.spec.sampling(attempt))

    def _settle(
        self, job: _Job, result: Generation | BackendError, attempt: int
    ) -> DraftOutcome | None:
        job.attempts = attempt + 1
        job.failed_call = result if isinstance(result, BackendError) else None
        if isinstance(result, BackendError):
            job.error = str(result)
            if result.retryable:
                return None
            return _outcome(
                job, "failed", attempts=job.attempts, error=job.error, backend_error=result
            )
        try:
            criteria = parse_draft(result.text, self.spec, evidence=job.evidence)
            spec = self._rubric(job, criteria, attempt)
        except DraftError as err:
            cut = " (the reply reached its token limit)" if result.finish_reason == "length" else ""
            job.error = f"{err}{cut}"
            return None
        try:
            saved = save_rubric(self.session, spec)
        except RubricsvcError as err:  # e.g. the name belongs to another prompt's rubric
            return _outcome(job, "failed", attempts=job.attempts, error=str(err))
        return _outcome(job, saved.outcome, saved.version.ref, attempts=job.attempts)

    def _rubric(self, job: _Job, criteria: list[CriterionSpec], attempt: int) -> RubricSpec:
        generic: list[str] = []
        if self.options.with_generic:
            criteria, generic = with_generic(criteria)
        template = self.spec.prompt_template()
        detail: dict[str, Any] = {
            "generator_model": self.backend.model,
            "generator_backend": self.spec.backend,
            "template": template.name,
            "template_sha256": template.sha256,
            "sampling": self.spec.sampling(attempt),
            "generator_hash": self.report.generator_hash,
            "generator": self.settings,
            "generation_key": job.key,
            "attempts": attempt + 1,
            "inputs": {
                "reference_answer": job.prompt.reference_answer is not None,
                "evidence_documents": len(job.evidence),
            },
        }
        if generic:
            detail["generic_criteria"] = generic
        try:
            return RubricSpec(
                name=job.name,
                prompt=prompt_spec_of(job.prompt),
                criteria=criteria,
                origin="llm",
                origin_detail=detail,
            )
        except ValidationError as err:  # e.g. only pitfalls: no positive criterion
            raise DraftError(describe_validation_error(err, limit=1)) from None
