"""Attack the reward's judge before training, and refuse a judge that is easy to game."""

from __future__ import annotations

from collections.abc import Callable

from rubricsvc.audit.attacks import select_attacks
from rubricsvc.audit.runner import AuditOptions, AuditReport, run_audit
from rubricsvc.audit.sets import DEMO_SET, demo_items
from rubricsvc.audit.store import save_audit
from rubricsvc.db import make_engine, session_scope
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.failures import ResponseFailurePolicy
from rubricsvc.scoring.judge_configs import find_reward_judge
from trainer.config import TrainConfig
from trainer.scorers import release_provider, shared_provider


def audit_reward_judge(config: TrainConfig, say: Callable[[str], None]) -> AuditReport:
    """Run the audit on the demo set, store it against the judge config, and raise
    ``ValidationFailed`` when an attack's mean inflation passes ``audit_max_inflation``, or
    it fails whatever the inflation (``AuditReport.problems``: an attack whose scores are
    masked on more than ``audit_max_masked_share`` of the items, or unmeasured)."""
    reward = config.reward
    attacks = select_attacks(config.audit_attacks)
    options = AuditOptions(
        aggregation=reward.aggregation,
        min_coverage=reward.min_coverage,
        response_failure=ResponseFailurePolicy(reward.response_failure),
        max_masked_share=config.audit_max_masked_share,
    )
    engine = make_engine(reward.engine_url())
    # The process's shared provider: the judge audited is the reward's, loaded once for both.
    backends = shared_provider(reward, None)
    try:
        with session_scope(engine) as session:
            # A judge refused as a reward (a promotion gate) is refused before it is attacked.
            spec = find_reward_judge(session, reward.judge, reward.mode)
            items = demo_items()
            say(f"auditing judge {spec.name} with {len(attacks)} attack(s) on the demo set")
            report = run_audit(spec, backends.factory(spec), items, DEMO_SET, options, attacks)
            save_audit(session, spec, items, report)
    finally:
        release_provider(backends)
        engine.dispose()
    if report.problems:
        raise ValidationFailed(
            f"judge {spec.name} failed its audit: {'; '.join(report.problems)}; training not "
            "started"
        )
    worst = max(report.attacks, key=lambda a: a.mean_inflation or 0.0)
    inflation = worst.mean_inflation or 0.0  # measured: an unmeasured one is a problem above
    if inflation > config.audit_max_inflation:
        raise ValidationFailed(
            f"judge {spec.name} failed its audit: attack {worst.name} ({worst.family}) raises "
            f"the score by {inflation:+.3f} on average over an honest weak answer, above "
            f"audit_max_inflation {config.audit_max_inflation:g}; training not started"
        )
    say(f"audit passed: largest mean inflation {inflation:+.3f} ({worst.name})")
    return report
