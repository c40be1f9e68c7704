"""Audits stored against the judge config they audited: part of the judge's lineage."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy.orm import Session

from rubricsvc.audit.runner import AuditItem, AuditReport
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import JudgeAudit
from rubricsvc.scoring.judge_configs import ensure_judge_config


def set_hash(items: list[AuditItem], report: AuditReport) -> str:
    """What was attacked, how, and with which attacks: the same hash means the same audit."""
    return content_hash(
        {
            "items": [asdict(item) for item in items],
            "options": report.options,
            "attacks": [a.name for a in report.attacks],
        }
    )


def save_audit(
    session: Session, spec: JudgeSpec, items: list[AuditItem], report: AuditReport
) -> JudgeAudit:
    row = JudgeAudit(
        judge_config_id=ensure_judge_config(session, spec).id,
        set_name=report.set_name,
        set_hash=set_hash(items, report),
        max_inflation=report.max_inflation(),
        report=asdict(report),
    )
    session.add(row)
    session.flush()
    return row
