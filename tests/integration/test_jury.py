"""Juries: a judge config that is a panel of judge configs, with the real embedded model.

One database for the module holds the demo rubrics and completions; the juries judge the haiku
prompt's completions (3 judged criteria each) to stay quick. Two juries are judged once and
reused (their member judgments come from the cache afterwards):

- ``panel``: ``embedded`` (criterion-prob, named in the judges file) and ``embedded-text``
  (criterion-text), on one completion. Whether the 135M model writes a parseable verdict line is its
  own affair, so the panel's score is checked against the rule for either case.
- ``ensemble``: ``embedded`` and the same model in criterion-prob under a reworded template (a
  prompt ensemble), on every haiku completion: both always give a value, so the spread is real.
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.completions import CompletionRecord, store_completion
from rubricsvc.config import get_settings
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec
from rubricsvc.judging.templates import BUNDLED_DIR
from rubricsvc.models import Completion, JudgeConfig, Judgment, JudgmentStatus, Score
from rubricsvc.scoring.judge_configs import ensure_judge_config, load_judge_file
from rubricsvc.scoring.jury import JuryScoredCompletion, score_judge
from rubricsvc.scoring.scorer import ScoreOptions, ScoreReport
from rubricsvc.scoring.selection import Selection
from tests.cli_runner import add_examples, cli_error, cli_ok
from tests.helpers import approve_rubrics
from tests.requirements import prepared_model_dir

pytestmark = [pytest.mark.model, pytest.mark.slow]

PROMPT = "demo-haiku"
JUDGED_CRITERIA = 3  # the haiku rubric's criteria that a judge reads (one more is a check)
JUDGES_YAML = """
judges:
  - name: panel
    jury:
      members:
        - embedded                         # by name: resolved when the file is read
        # embedded-text's settings (retries are not hashed: its config is the built-in one's);
        # one attempt per judgment keeps the test short when the reply has no verdict line
        - {name: embedded-text, mode: criterion-text, retries: 0}
  - name: ensemble
    jury:
      members:
        - embedded
        - {name: reworded, mode: criterion-prob, template: TEMPLATE}
"""


@dataclass
class Module:
    url: str
    engine: Engine
    provider: BackendProvider
    juries: dict[str, JudgeSpec]
    completions: list[int]  # the haiku prompt's, by id


@dataclass
class Judged:
    spec: JudgeSpec
    report: ScoreReport


def _score(
    session: Session, provider: BackendProvider, spec: JudgeSpec, completions: list[int]
) -> ScoreReport:
    selection = Selection(completion_ids=tuple(completions))
    report = score_judge(
        session, spec, selection, ScoreOptions(), provider.factory, checkpoint=session.commit
    )
    session.commit()
    return report


@pytest.fixture(scope="module")
def module(
    migrated_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Module]:
    prepared_model_dir()
    folder = tmp_path_factory.mktemp("jury")
    shutil.copy(migrated_sqlite_template, folder / "rubricsvc.sqlite")
    url = f"sqlite:///{folder / 'rubricsvc.sqlite'}"
    add_examples(url)
    template = (BUNDLED_DIR / "criterion_prob.txt").read_text(encoding="utf-8")
    reworded = template.replace(
        "You are a strict, fair grader.", "You are a careful teacher checking homework."
    )
    assert reworded != template
    (folder / "reworded.txt").write_text(reworded, encoding="utf-8")
    (folder / "judges.yaml").write_text(
        JUDGES_YAML.replace("TEMPLATE", str(folder / "reworded.txt"))
    )
    engine = db.make_engine(url)
    with Session(engine) as session:
        juries = {spec.name: spec for spec in load_judge_file(folder / "judges.yaml", session)}
        for spec in juries.values():
            ensure_judge_config(session, spec)
        completions = list(
            session.scalars(
                select(Completion.id)
                .where(Completion.prompt.has(external_id=PROMPT))
                .order_by(Completion.id)
            )
        )
        session.commit()
    assert len(completions) >= 2
    with BackendProvider.from_settings(get_settings()) as provider:
        yield Module(url, engine, provider, juries, completions)
    engine.dispose()


@pytest.fixture
def session(module: Module) -> Iterator[Session]:
    with Session(module.engine, expire_on_commit=False) as session:
        yield session
        session.rollback()


@pytest.fixture(scope="module")
def ensemble(module: Module) -> Judged:
    spec = module.juries["ensemble"]
    with Session(module.engine, expire_on_commit=False) as session:
        return Judged(spec, _score(session, module.provider, spec, module.completions))


@pytest.fixture(scope="module")
def panel(module: Module, ensemble: Judged) -> Judged:
    spec = module.juries["panel"]
    with Session(module.engine, expire_on_commit=False) as session:
        return Judged(spec, _score(session, module.provider, spec, module.completions[:1]))


def _juried(report: ScoreReport) -> list[JuryScoredCompletion]:
    """A jury's report's scores, each a jury's."""
    scores = [s for s in report.scores if isinstance(s, JuryScoredCompletion)]
    assert len(scores) == len(report.scores)
    return scores


def _config(session: Session, config_hash: str) -> JudgeConfig:
    return session.scalars(select(JudgeConfig).where(JudgeConfig.config_hash == config_hash)).one()


def _jury_rows(session: Session, name: str) -> list[Score]:
    config = session.scalars(select(JudgeConfig).where(JudgeConfig.name == name)).one()
    query = select(Score).where(Score.judge_config_id == config.id).order_by(Score.completion_id)
    return list(session.scalars(query))


def _member_values(session: Session, row: Score) -> list[float | None]:
    """Each member's own stored score of the jury score's completion and version; checks that
    the jury recorded exactly those, and that the member's judgments are its own."""
    values = []
    for member in row.details["members"]:
        config = _config(session, member["config_hash"])
        own = session.scalars(
            select(Score).where(
                Score.judge_config_id == config.id,
                Score.completion_id == row.completion_id,
                Score.rubric_version_id == row.rubric_version_id,
            )
        ).one()
        assert member["value"] == (None if own.value is None else pytest.approx(own.value))
        assert member["status"] == own.status.value
        judged = session.scalar(
            select(func.count())
            .select_from(Judgment)
            .where(Judgment.judge_config_id == config.id)
            .where(Judgment.completion_id == row.completion_id)
        )
        assert judged == JUDGED_CRITERIA
        values.append(own.value)
    return values


def test_a_panel_of_criterion_prob_and_criterion_text_stores_both_members(
    module: Module, panel: Judged, session: Session
) -> None:
    spec = panel.spec
    assert spec.jury is not None
    assert [(m.name, m.mode) for m in spec.jury.members] == [
        ("embedded", "criterion-prob"),
        ("embedded-text", "criterion-text"),
    ]
    report = panel.report
    assert report.judgments == 2 * JUDGED_CRITERIA
    assert report.computed + report.cached + report.failed == report.judgments
    assert report.cached >= JUDGED_CRITERIA  # embedded's verdicts were made for the ensemble
    (row,) = _jury_rows(session, "panel")
    members = row.details["members"]
    assert [m["member"] for m in members] == ["panel/embedded", "panel/embedded-text"]
    modes = [_config(session, m["config_hash"]).verdict_mode for m in members]
    assert modes == ["criterion-prob", "criterion-text"]
    # The built-in judges themselves: their configs, so their cached verdicts are shared.
    assert [m["config_hash"] for m in members] == [
        BUILTIN_JUDGES[name].config_hash() for name in ("embedded", "embedded-text")
    ]
    values = _member_values(session, row)
    missing = [m["member"] for m, v in zip(members, values, strict=True) if v is None]
    if missing:  # a member gave no value: masked, naming it, no spread
        assert row.status.value == "masked" and row.value is None
        assert row.details["spread"] is None
        (reason,) = [r for r in row.details["reasons"] if r.startswith("jury:")]
        assert reason.startswith(f"jury: no value from {', '.join(missing)} (")
    else:
        known = [v for v in values if v is not None]
        assert row.value == pytest.approx(statistics.fmean(known))
        assert row.details["spread"] == pytest.approx(max(known) - min(known))
    (scored,) = report.scores
    assert isinstance(scored, JuryScoredCompletion)
    assert scored.value == row.value and scored.members == members
    # Shown: the export writes the members and the spread.
    exported = cli_ok(
        "scores", "export", "--judge", "panel", "--aggregation", "rar", database_url=module.url
    )
    (line,) = [json.loads(text) for text in exported.stdout.splitlines()]
    assert [m["value"] for m in line["members"]] == [m["value"] for m in members]
    assert line["spread"] == row.details["spread"] and line["combine"] == "mean"


def test_the_jury_score_is_the_mean_of_its_members_and_their_spread(
    module: Module, ensemble: Judged, session: Session
) -> None:
    report = ensemble.report
    assert report.judgments == 2 * JUDGED_CRITERIA * len(module.completions)
    assert report.failed == 0
    rows = _jury_rows(session, "ensemble")
    assert [r.completion_id for r in rows] == module.completions
    for row, scored in zip(rows, report.scores, strict=True):
        values = _member_values(session, row)
        assert all(v is not None for v in values)
        known = [v for v in values if v is not None]
        assert row.status.value == "ok"
        assert row.value == pytest.approx(statistics.fmean(known))
        assert row.details["spread"] == pytest.approx(max(known) - min(known))
        assert row.details["confidence"] == pytest.approx(1 - row.details["spread"])
        assert scored.value == pytest.approx(row.value)
    hashes = {m["config_hash"] for row in rows for m in row.details["members"]}
    assert len(hashes) == 2  # two configs: the template is part of the hash


def test_median_and_majority_combine_the_same_members(
    module: Module, ensemble: Judged, session: Session
) -> None:
    assert ensemble.spec.jury is not None
    for combine in ("median", "majority"):
        spec = JudgeSpec(
            name=f"ensemble-{combine}",
            jury=ensemble.spec.jury.model_copy(update={"combine": combine}),
        )
        report = _score(session, module.provider, spec, module.completions)
        assert report.backend_requests == 0  # the members' verdicts are cached
        for scored in report.scores:
            assert isinstance(scored, JuryScoredCompletion)
            values = [m["value"] for m in scored.members]
            expected = (
                statistics.median(values)
                if combine == "median"
                else sum(v >= 0.5 for v in values) / len(values)
            )
            assert scored.value == pytest.approx(expected)


def test_max_spread_masks_a_score_whose_members_disagree(
    module: Module, ensemble: Judged, session: Session
) -> None:
    spreads = {s.completion_id: s.spread for s in _juried(ensemble.report)}
    widest = max(s for s in spreads.values() if s is not None)
    assert widest > 0, "the two prompts gave the same score to every completion"
    bound = widest / 2
    assert ensemble.spec.jury is not None
    strict = JudgeSpec(
        name="ensemble-strict",
        jury=ensemble.spec.jury.model_copy(update={"max_spread": bound}),
    )
    assert strict.config_hash() != ensemble.spec.config_hash()  # max_spread is hashed
    report = _score(session, module.provider, strict, module.completions)
    assert report.backend_requests == 0
    unmasked = {s.completion_id: s.value for s in ensemble.report.scores}
    masked = 0
    for scored in _juried(report):
        spread = spreads[scored.completion_id]
        assert spread is not None and scored.spread == pytest.approx(spread)
        if spread > bound:
            masked += 1
            assert scored.status == "masked" and scored.value is None
            assert any("disagree" in reason for reason in scored.reasons)
        else:
            assert scored.value == pytest.approx(unmasked[scored.completion_id])
    assert masked >= 1
    stored = _jury_rows(session, "ensemble-strict")
    assert sum(1 for r in stored if r.status.value == "masked") == masked


def test_a_second_run_comes_from_the_cache_and_the_command_shows_the_members(
    module: Module, ensemble: Judged, session: Session
) -> None:
    again = _score(session, module.provider, ensemble.spec, module.completions)
    assert again.backend_requests == 0
    assert (again.computed, again.failed) == (0, 0)
    assert again.cached == again.judgments == ensemble.report.judgments
    first = [s.value for s in ensemble.report.scores]
    assert [s.value for s in again.scores] == pytest.approx(first)

    # The command finds the stored jury by name; nothing is judged, no model is loaded.
    shown = cli_ok(
        "score", "--judge", "ensemble", "--prompt", PROMPT, "--json", database_url=module.url
    ).json()
    assert shown["backend_requests"] == 0 and shown["cached"] == shown["judgments"]
    by_id = {s.completion_id: s for s in _juried(ensemble.report)}
    assert len(shown["scores"]) == len(by_id)
    for scored in shown["scores"]:
        expected = by_id[scored["completion_id"]]
        assert [m["value"] for m in scored["members"]] == pytest.approx(
            [m["value"] for m in expected.members]
        )
        assert scored["spread"] == pytest.approx(expected.spread)
    table = cli_ok("score", "--judge", "ensemble", "--prompt", PROMPT, database_url=module.url)
    assert "spread" in table.stdout and "ensemble/reworded" in table.stdout
    assert "Everything came from the cache" in table.stdout


def test_a_member_alike_a_built_in_judge_is_stored_as_it_so_the_judge_still_serves(
    module: Module, migrated_sqlite_template: Path, tmp_path: Path
) -> None:
    """A jury scored first in a database, with an inline member of the built-in `embedded`'s
    settings: the member is stored as `embedded`, so `embedded` used on its own afterwards
    (a training run's gold scorer, say) finds its verdicts, not a refusal for settings another
    name holds."""
    shutil.copy(migrated_sqlite_template, tmp_path / "fresh.sqlite")
    url = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    add_examples(url)
    jury = JudgeSpec.model_validate(
        {
            "name": "alike",
            "jury": {"members": [{"name": "bundled", "backend": "transformers"}]},
        }
    )
    engine = db.make_engine(url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            completion = session.scalars(
                select(Completion.id).where(Completion.prompt.has(external_id=PROMPT))
            ).first()
            assert completion is not None
            first = _score(session, module.provider, jury, [completion])
            assert first.computed == JUDGED_CRITERIA
            (member,) = _juried(first)[0].members
            assert _config(session, member["config_hash"]).name == "embedded"
            alone = _score(session, module.provider, BUILTIN_JUDGES["embedded"], [completion])
            assert alone.cached == alone.judgments == JUDGED_CRITERIA
            assert alone.scores[0].value == pytest.approx(member["value"])
    finally:
        engine.dispose()


def test_three_samples_of_a_decoding_judge_are_three_seeded_configs(
    module: Module, session: Session
) -> None:
    # One criterion and one answer of a prompt of its own: three replies to decode in all.
    approve_rubrics(
        module.url,
        {
            "name": "jury/season",
            "prompt": {"external_id": "jury-season", "text": "Name a season of the year."},
            "criteria": [{"text": "Names one of the four seasons", "weight": 1}],
        },
    )
    record = CompletionRecord(prompt_external_id="jury-season", text="Autumn.", external_id="s")
    completion, _ = store_completion(session, "test", record)
    session.commit()
    spec = JudgeSpec.model_validate(
        {
            "name": "warm3",
            "jury": {
                "samples": 3,
                "members": [
                    # embedded-text at temperature 0.7; one attempt each keeps the test quick
                    {"name": "warm", "mode": "criterion-text", "temperature": 0.7, "retries": 0}
                ],
            },
        }
    )
    report = _score(session, module.provider, spec, [completion.id])
    assert report.judgments == 3
    # One request per sample, and one control call (the canary) per reply that could not be
    # read: the small judge often writes no verdict line.
    assert report.backend_requests == 3 + report.failed
    configs = session.scalars(
        select(JudgeConfig).where(JudgeConfig.name.like("warm3/warm#%")).order_by(JudgeConfig.name)
    ).all()
    assert [c.name for c in configs] == ["warm3/warm#0", "warm3/warm#1", "warm3/warm#2"]
    assert [c.settings["spec"]["seed"] for c in configs] == [0, 1, 2]
    assert [c.sampling["seed"] for c in configs] == [0, 1, 2]
    assert all(c.sampling["temperature"] == 0.7 for c in configs)
    judged = [
        session.scalars(
            select(Judgment).where(
                Judgment.judge_config_id == config.id, Judgment.completion_id == completion.id
            )
        ).one()
        for config in configs
    ]
    assert all(j.raw_output for j in judged)  # each sample's own reply is kept
    assert len({j.cache_key for j in judged}) == 3
    (scored,) = report.scores
    assert isinstance(scored, JuryScoredCompletion)
    assert [m["judge"] for m in scored.members] == [c.name for c in configs]
    values = [m["value"] for m in scored.members]
    assert values == pytest.approx([j.value for j in judged])  # one criterion: its value
    if None in values:  # a sample's reply could not be read: masked, naming it
        assert scored.status == "masked" and scored.value is None
        assert any("no value from" in reason for reason in scored.reasons)
    else:
        assert scored.value == pytest.approx(statistics.fmean(values))
        assert scored.spread == pytest.approx(max(values) - min(values))
    ok = sum(1 for j in judged if j.status == JudgmentStatus.OK)
    assert ok == report.computed and report.failed == 3 - ok


def test_three_samples_of_a_group_judge_give_a_value_each_and_their_spread(
    module: Module, session: Session
) -> None:
    """Group mode decodes a schema-guided JSON answer, which the 135M model always completes:
    three warm samples of it each give every completion a value, so the spread is real."""
    spec = JudgeSpec.model_validate(
        {
            "name": "group3",
            "jury": {
                "samples": 3,
                "members": [{"name": "warm", "mode": "group", "temperature": 0.7}],
            },
        }
    )
    report = _score(session, module.provider, spec, module.completions)
    configs = session.scalars(
        select(JudgeConfig).where(JudgeConfig.name.like("group3/warm#%")).order_by(JudgeConfig.name)
    ).all()
    assert [c.settings["spec"]["seed"] for c in configs] == [0, 1, 2]
    # Each sample judges the prompt's group once per repeat (2), shared by its members.
    for config in configs:
        judgments = session.scalars(
            select(Judgment).where(Judgment.judge_config_id == config.id)
        ).all()
        assert len(judgments) == 2
        assert all(j.status == JudgmentStatus.OK for j in judgments)
        assert all(sorted((j.detail or {})["order"]) == module.completions for j in judgments)
    scores = _juried(report)
    assert len(scores) == len(module.completions)
    for scored in scores:
        values = [m["value"] for m in scored.members]
        assert None not in values and len(values) == 3
        assert scored.value == pytest.approx(statistics.fmean(values))
        assert scored.spread == pytest.approx(max(values) - min(values))
        assert scored.confidence == pytest.approx(max(0.0, 1 - (max(values) - min(values))))
    for row in _jury_rows(session, "group3"):
        assert row.details["spread"] is not None


def test_samples_of_a_judge_that_cannot_vary_are_refused_in_one_line(
    module: Module, tmp_path: Path
) -> None:
    for member, why in (
        ("embedded-text", "temperature 0"),  # decodes, but greedily
        ("embedded", "decodes nothing"),  # criterion-prob reads one forward pass
    ):
        path = tmp_path / f"{member}.yaml"
        path.write_text(f"name: same-{member}\njury:\n  samples: 3\n  members: [{member}]\n")
        error = cli_error("judges", "add", str(path), database_url=module.url)
        assert len(error.splitlines()) == 1, error
        assert why in error and f"'{member}'" in error
    with Session(module.engine) as session:
        names = session.scalars(select(JudgeConfig.name).where(JudgeConfig.name.like("same-%")))
        assert list(names) == []
