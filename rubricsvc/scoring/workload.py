"""The work a request asks for, counted by planning it, before anything is stored or judged.

Each (completion, rubric version) is planned by its judge's mode exactly as scoring will plan
it (``scorer.plan_cases``): a pairwise or group judge with the completion's peers, a
citations criterion with one check per cited (claim, document), several criteria in one call
as one judgment. Each judgment counts once (a pairwise mirror, a group's repeats: shared by
the completions that plan them), the cache not subtracted; a check criterion counts one; a
jury counts each member (and sample). What the citation checks cost besides their judgments
(``EvidenceCost``: cited documents indexed, claims and passages sent, passages ranked) is
counted with them and bounded apart (``evidence_refusal``). A reward batch is planned as
``store_completions`` would store it: a completion already stored is reused, a new one is
given the id the database will give it (which decides a compared group). Nothing is stored,
no model loaded, no judge called. A request past its judge's ``max_request_chars`` is not
refused here: that judgment fails when it would be sent, charged to the response that made
it too long (``scoring.request_size``), and the rest of the batch is judged.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.documents import DocumentRecord
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import DocumentView
from rubricsvc.models import Completion, Document
from rubricsvc.scoring.rewards import (
    RewardRequest,
    find_prompts,
    routed_rubrics,
    wanted_completions,
)
from rubricsvc.scoring.scorer import (
    EvidenceCost,
    Planned,
    Workload,
    completion_view,
    plan_cases,
    view_of,
    work_of,
)
from rubricsvc.scoring.selection import Selection, select_work


def planned_work(
    spec: JudgeSpec, work: Sequence[Planned], pairs: Sequence[tuple[int, int]] = ()
) -> Workload:
    """What scoring ``work`` with ``spec`` (a judge, or a jury: each member) plans."""
    workload = Workload()
    for member in spec.jury_members() or [spec]:
        workload.add(work_of(plan_cases(member, member.config_hash(), work, pairs)))
    return workload


def reward_work(
    session: Session,
    spec: JudgeSpec,
    requests: Sequence[RewardRequest],
    *,
    source: str,
    include_drafts: bool,
) -> Workload:
    """What ``compute_rewards`` would plan for ``requests``; reads only. Raises what it would
    (NotFoundError for an unknown prompt or rubric, ValidationFailed for a malformed item)."""
    prompts = find_prompts(session, requests)
    wanted = wanted_completions(session, requests, prompts, source)
    prompt_of = {prompt.id: prompt for prompt in prompts}
    rows = dict(wanted.stored)
    views = {completion.id: completion_view(completion) for completion in rows.values()}
    next_id = (session.scalar(select(func.max(Completion.id))) or 0) + 1
    stored_documents = _stored_documents(
        session, [r for _, _, records in wanted.new.values() for r in records if r.text is None]
    )
    for offset, (key, (request, messages, records)) in enumerate(wanted.new.items()):
        # Never added to the session: it stands for the row ``store_completions`` would add.
        row = Completion(
            id=next_id + offset,
            prompt_id=key[0],
            text=request.completion,
            content_hash=key[1],
            messages=messages,
        )
        rows[key] = row
        documents = tuple(_document_view(r, stored_documents) for r in records)
        views[row.id] = view_of(row.id, prompt_of[key[0]], row, documents)
    by_rubric: dict[str | None, dict[int, Completion]] = {}
    for request, key in zip(requests, wanted.keys, strict=True):
        by_rubric.setdefault(request.rubric, {})[rows[key].id] = rows[key]
    workload = Workload()
    routed = routed_rubrics(requests)
    for rubric, chosen in by_rubric.items():  # scored one rubric at a time, as compute_rewards
        ids = sorted(chosen)
        selection = Selection(
            completion_ids=tuple(ids),
            rubric_ref=rubric,
            include_drafts=include_drafts or rubric in routed,
            one_version_each=True,  # as compute_rewards: an ambiguous completion costs nothing
        )
        work, _ = select_work(session, selection, [chosen[i] for i in ids])
        planned = [
            Planned(views[c.id], c.prompt_id, prompt_of[c.prompt_id].content_hash, version)
            for c, version in work
        ]
        workload.add(planned_work(spec, planned))
    return workload


def _stored_documents(session: Session, records: Sequence[DocumentRecord]) -> dict[str, Document]:
    """The stored documents that records naming only a content hash stand for."""
    digests = sorted({record.digest() for record in records})
    found: dict[str, Document] = {}
    for part in batches(digests):
        for document in session.scalars(select(Document).where(Document.content_hash.in_(part))):
            found[document.content_hash] = document
    return found


def _document_view(record: DocumentRecord, stored: dict[str, Document]) -> DocumentView:
    """A listed document as a mode plans with it: its own fields, else the stored document's
    (one named by a hash nothing has is refused when the batch is stored)."""
    digest = record.digest()
    document = stored.get(digest)
    if record.text is None and document is not None:
        return DocumentView(str(record.label), document.url, document.title, document.text, digest)
    return DocumentView(str(record.label), record.url, record.title, record.text or "", digest)


def evidence_refusal(evidence: EvidenceCost, limit: int) -> str | None:
    """Why work whose citation checks cost ``evidence`` is refused past ``limit``, naming the
    figure and its parts (the start of a 413's message), or None when it is in bounds."""
    if evidence.total <= limit:
        return None
    return (
        f"{evidence.total} evidence cost of citation checks (document characters indexed: "
        f"{evidence.document_chars} in {len(evidence.documents)} document(s); characters "
        f"sent to the judge: {evidence.sent_chars}; passages ranked: {evidence.passages}): "
        f"at most {limit}"
    )
