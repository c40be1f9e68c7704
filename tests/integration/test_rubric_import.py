"""`rubricsvc rubrics import --format ...` and `rubrics export`: the public rubric data in
tests/data, rubrics only, and an exact round trip through the project's JSON Lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.models import Completion, Criterion, Judgment, Prompt, Rubric, RubricVersion
from rubricsvc.prompts import get_or_create_prompt
from rubricsvc.rubrics.generation import DraftRequest, generate_rubrics
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.repository import list_versions
from rubricsvc.rubrics.versions import spec_of
from tests.cli_runner import CliResult, run_cli
from tests.helpers import read_database

DATA = Path(__file__).resolve().parents[1] / "data"
DRB = DATA / "deep_research_bench"
DRB_CRITERIA = DRB / "data" / "criteria_data" / "criteria.jsonl"
HEALTHBENCH_FILE = DATA / "healthbench_m42_sample" / "data" / "sample" / "judge_responses.jsonl"
AUTOJ = DATA / "autoj" / "other_resources" / "scenario_criteria"


def _ok(*args: str, database_url: str) -> CliResult:
    result = run_cli(*args, database_url=database_url)
    assert result.code == 0, result.stderr
    return result


def _count(database_url: str, table: type) -> int:
    return int(
        read_database(
            database_url, lambda s: s.scalar(select(func.count()).select_from(table)) or 0
        )
    )


def _criteria_by_rubric(database_url: str) -> dict[str, list[Criterion]]:
    def read(session: Session) -> dict[str, list[Criterion]]:
        return {v.rubric.name: list(v.criteria) for v in list_versions(session)}

    stored: dict[str, list[Criterion]] = read_database(database_url, read)
    return stored


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow  # 5-20 s here: left out of the inner loop (make test-fast), run by make test
def test_deepresearch_bench_rubrics_keep_every_weight(database_url: str) -> None:
    imported = _ok(
        "rubrics", "import", "--format", "deepresearch-bench", str(DRB), database_url=database_url
    )
    assert "100 created, 0 new version(s), 0 unchanged (2517 criteria)" in imported.stdout
    stored = _criteria_by_rubric(database_url)
    assert len(stored) == 100
    for task in _jsonl(DRB_CRITERIA):
        expected = [
            (dimension, item["criterion"], item["explanation"], item["weight"])
            for dimension, items in task["criterions"].items()
            for item in items
        ]
        got = [(c.theme, c.text, c.explanation, c.weight) for c in stored[f"drb/{task['id']}"]]
        assert got == expected  # floats compared exactly, not approximately
    assert _count(database_url, Completion) == 0  # rubrics only

    # The criteria file alone and the judged-data importer map onto the same rubrics.
    again = _ok(
        "rubrics",
        "import",
        "--format",
        "deepresearch-bench",
        str(DRB_CRITERIA),
        database_url=database_url,
    )
    assert "0 created, 0 new version(s), 100 unchanged" in again.stdout
    full = _ok("import", "deepresearch-bench", str(DRB), database_url=database_url)
    assert "0 created, 0 new version(s), 100 unchanged" in full.stdout
    assert _count(database_url, RubricVersion) == 100


def test_healthbench_rubrics_without_their_verdicts(database_url: str) -> None:
    imported = _ok(
        "rubrics",
        "import",
        "--format",
        "healthbench",
        str(HEALTHBENCH_FILE),
        database_url=database_url,
    )
    assert "100 created" in imported.stdout and "(1157 criteria)" in imported.stdout
    assert "prompts:     100 added" in imported.stdout
    weights = [
        c.weight for criteria in _criteria_by_rubric(database_url).values() for c in criteria
    ]
    assert (len(weights), sum(w < 0 for w in weights)) == (1157, 342)
    source = [i["points"] for r in _jsonl(HEALTHBENCH_FILE) for i in r["rubrics"]]
    assert sorted(weights) == sorted(float(p) for p in source)
    assert _count(database_url, Judgment) == _count(database_url, Completion) == 0

    full = _ok("import", "healthbench", str(HEALTHBENCH_FILE), database_url=database_url)
    assert "0 created, 0 new version(s), 100 unchanged" in full.stdout
    assert _count(database_url, Judgment) == 1157


def _autoj_source() -> dict[str, list[tuple[str, float, str, str]]]:
    """Each scenario's (content, weight, type, section), read independently of the importer."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor(
        "!include", lambda loader, node: ("include", loader.construct_scalar(node))
    )
    root = AUTOJ.parents[1]
    scenarios = {}
    for file in sorted((AUTOJ / "specials").glob("*.yaml")):
        document = yaml.load(file.read_text(), Loader=Loader)
        items = []
        for key, value in document.items():
            if key != "extended":
                basics = yaml.safe_load((root / value[1]).read_text())
                items += [(c["content"], c["weight"], c["type"], key) for c in basics.values()]
        extended = document.get("extended", {}).values()
        items += [(c["content"], c["weight"], c["type"], "extended") for c in extended]
        scenarios[f"autoj/{file.stem}"] = items
    return scenarios


def test_autoj_scenarios_with_their_included_basics(database_url: str) -> None:
    imported = _ok(
        "rubrics", "import", "--format", "autoj", str(AUTOJ.parents[1]), database_url=database_url
    )
    assert "58 created, 0 new version(s), 0 unchanged (705 criteria)" in imported.stdout
    stored = _criteria_by_rubric(database_url)
    source = _autoj_source()
    assert set(stored) == set(source) and len(stored) == 58
    for name, items in source.items():
        got = [(c.text, c.weight, c.theme, c.tags[1].removeprefix("from:")) for c in stored[name]]
        assert got == [(t.strip(), float(w), kind, section) for t, w, kind, section in items], name
    sections = [c.tags[1] for criteria in stored.values() for c in criteria]
    assert (sections.count("from:extended"), len(sections) - sections.count("from:extended")) == (
        323,
        382,
    )
    # 323 extended criteria plus the 28 of the five basics files: the 351 the source counts.
    basics = {c.text for criteria in stored.values() for c in criteria if c.theme == "basic"}
    assert len(basics) == 28
    assert _count(database_url, Prompt) == 0  # scenario rubrics are shared, not per prompt
    assert (
        read_database(
            database_url,
            lambda s: s.scalar(select(func.count()).where(Rubric.prompt_id.is_not(None))),
        )
        == 0
    )


def _prometheus_file(tmp_path: Path) -> Path:
    path = tmp_path / "score_rubrics.json"
    rubrics = [
        {
            "criteria": "Does the response explain the idea so a beginner can follow?",
            **{
                f"score{n}_description": f"Level {n}: {text}"
                for n, text in enumerate(
                    ["confusing", "mostly unclear", "partly clear", "clear", "clear and engaging"],
                    1,
                )
            },
        },
        {
            "criteria": "Is the response factually accurate?",
            **{f"score{n}_description": f"{n} of 5 statements hold" for n in range(1, 6)},
        },
    ]
    path.write_text(json.dumps(rubrics, indent=1))
    return path


def _generated(database_url: str) -> None:
    """A rubric drafted through the generation service (scripted model), origin llm."""
    reply = json.dumps(
        {
            "criteria": [
                {"text": "States the boiling time", "category": "essential", "theme": "coverage"},
                {"text": "Says to cool the egg 0.1 min", "category": "optional", "theme": "style"},
                {"text": "Claims eggs need no water", "category": "pitfall", "theme": "accuracy"},
            ]
        }
    )
    engine = db.make_engine(database_url)
    with db.session_scope(engine) as session:
        prompt = get_or_create_prompt(
            session, [{"role": "user", "content": "Boil an egg?"}], external_id="egg"
        )
        spec = GeneratorSpec(backend="scripted", min_criteria=3, max_criteria=5)
        report = generate_rubrics(
            session,
            [DraftRequest(prompt.id, ("Eggs boil at 100 C.",))],
            spec,
            lambda: ScriptedBackend(text=lambda _r: reply),
        )
        assert report.count("created") == 1
    engine.dispose()


def _all_rubrics(database_url: str) -> dict[str, tuple[str, dict[str, Any]]]:
    def read(session: Session) -> dict[str, tuple[str, dict[str, Any]]]:
        return {
            v.rubric.name: (v.content_hash, spec_of(v).model_dump(mode="json"))
            for v in list_versions(session)
        }

    rubrics: dict[str, tuple[str, dict[str, Any]]] = read_database(database_url, read)
    return rubrics


@pytest.mark.slow
def test_export_then_import_reproduces_every_rubric(
    database_url: str, tmp_path: Path, migrated_sqlite_template: Path
) -> None:
    for fmt, path in [
        ("deepresearch-bench", DRB),
        ("healthbench", HEALTHBENCH_FILE),
        ("autoj", AUTOJ),
        ("prometheus", _prometheus_file(tmp_path)),
    ]:
        _ok("rubrics", "import", "--format", fmt, str(path), database_url=database_url)
    _generated(database_url)
    exported = tmp_path / "rubrics.jsonl"
    _ok("rubrics", "export", "--all", "-o", str(exported), database_url=database_url)

    fresh = tmp_path / "fresh.sqlite"
    shutil.copy(migrated_sqlite_template, fresh)
    fresh_url = f"sqlite:///{fresh}"
    imported = _ok(
        "rubrics", "import", "--format", "rubricsvc", str(exported), database_url=fresh_url
    )
    assert "261 created, 0 new version(s), 0 unchanged" in imported.stdout

    before, after = _all_rubrics(database_url), _all_rubrics(fresh_url)
    assert len(before) == 261  # 100 DRB, 100 HealthBench, 58 Auto-J, 2 Prometheus, 1 generated
    assert after == before  # same content hash and the same rubric, field for field
    assert before["gen/egg"][1]["origin"] == "llm"
    assert before["drb/51"][1]["dimension_weights"] is not None
    reexported = tmp_path / "again.jsonl"
    _ok("rubrics", "export", "--all", "-o", str(reexported), database_url=fresh_url)
    assert reexported.read_bytes() == exported.read_bytes()


def test_one_bad_scenario_stores_nothing(sqlite_url: str, tmp_path: Path) -> None:
    copy = tmp_path / "autoj"
    shutil.copytree(AUTOJ.parents[1], copy)
    bad = copy / "other_resources" / "scenario_criteria" / "specials" / "writing_email.yaml"
    bad.write_text(bad.read_text().replace("weight: 5", "weight: five", 1))
    result = run_cli("rubrics", "import", "--format", "autoj", str(copy), database_url=sqlite_url)
    assert result.code == 2
    assert "writing_email.yaml: extended.conciseness: weight" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert _count(sqlite_url, Rubric) == 0


def test_export_refuses_what_it_cannot_write(sqlite_url: str, tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"name": "a/b", "criteria": [{"text": "Short", "weight": 1}]}))
    _ok("rubrics", "add", str(path), database_url=sqlite_url)
    path.write_text(yaml.safe_dump({"name": "a/b", "criteria": [{"text": "Brief", "weight": 1}]}))
    _ok("rubrics", "add", str(path), database_url=sqlite_url)
    both = run_cli("rubrics", "export", "a/b@1", "a/b@2", database_url=sqlite_url)
    assert both.code == 2 and "'a/b' is named twice" in both.stderr
    one_json = run_cli(
        "rubrics", "export", "--format", "json", "a/b@1", "a/b@2", database_url=sqlite_url
    )
    assert one_json.code == 2 and "--format json writes one version" in one_json.stderr
    lines = _ok("rubrics", "export", "--format", "jsonl", "a/b@1", database_url=sqlite_url)
    assert [json.loads(line)["criteria"][0]["text"] for line in lines.stdout.splitlines()] == [
        "Short"
    ]


# -- Auto-J includes stay inside the imported root ----------------------------------------

SECRET = "leak:\n  content: SECRET-TOKEN from outside the data set\n  weight: 5\n  type: basic\n"


def _autoj_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the Auto-J data, and a readable basics-shaped file outside it."""
    copy = tmp_path / "autoj"
    shutil.copytree(AUTOJ.parents[1], copy)
    secret = tmp_path / "secret.yaml"
    secret.write_text(SECRET)
    return copy, secret


def _stored(database_url: str) -> tuple[int, ...]:
    return tuple(
        _count(database_url, table) for table in (Prompt, Rubric, RubricVersion, Criterion)
    )


def _refused(path: Path, database_url: str, *expected: str) -> None:
    """Importing ``path`` fails with one line holding each of ``expected``; nothing changes."""
    before = _stored(database_url)
    result = run_cli("rubrics", "import", "--format", "autoj", str(path), database_url=database_url)
    assert result.code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for text in expected:
        assert text in lines[0], lines[0]
    assert "SECRET-TOKEN" not in result.stdout + result.stderr
    assert _stored(database_url) == before


def _point_include(scenario: Path, include: str) -> None:
    text = scenario.read_text()
    old = '"./other_resources/scenario_criteria/basics/basic_writing.yaml"'
    assert old in text
    scenario.write_text(text.replace(old, json.dumps(include), 1))


def test_autoj_refuses_includes_outside_the_root(sqlite_url: str, tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"name": "kept/one", "criteria": [{"text": "A", "weight": 1}]}))
    _ok("rubrics", "add", str(good), database_url=sqlite_url)  # what must stay as it is
    copy, secret = _autoj_copy(tmp_path)
    scenario_criteria = copy / "other_resources" / "scenario_criteria"
    scenario = scenario_criteria / "specials" / "writing_email.yaml"
    original = scenario.read_text()

    # A relative include that climbs out, and an absolute one.
    for include in ("../../../../secret.yaml", str(secret)):
        _point_include(scenario, include)
        _refused(copy, sqlite_url, f"{scenario}: !include {include!r}", "inside the repository")
        scenario.write_text(original)

    # Found by the upward lookup above the root: inside the repository, outside the folder given.
    (copy / "other_resources" / "secret.yaml").write_text(SECRET)
    _point_include(scenario, "./secret.yaml")
    _refused(
        scenario_criteria,
        sqlite_url,
        f"{scenario}: !include './secret.yaml': resolves to {copy / 'other_resources'}",
        f"outside the imported folder {scenario_criteria.resolve()}",
    )
    assert _stored(sqlite_url) == (0, 1, 1, 1)


def test_autoj_refuses_symlinks_that_point_outside(sqlite_url: str, tmp_path: Path) -> None:
    copy, secret = _autoj_copy(tmp_path)
    scenario_criteria = copy / "other_resources" / "scenario_criteria"
    basics = scenario_criteria / "basics" / "basic_writing.yaml"
    scenario = scenario_criteria / "specials" / "writing_email.yaml"

    # An included basics file that is a symlink to a file outside.
    kept = basics.read_text()
    basics.unlink()
    basics.symlink_to(secret)
    include = "./other_resources/scenario_criteria/basics/basic_writing.yaml"
    for root in (copy, scenario_criteria):
        _refused(
            root,
            sqlite_url,
            f"!include {include!r}: resolves to {secret.resolve()}, outside the imported folder",
        )

    # A symlinked folder on the way is the same.
    basics.unlink()
    basics.write_text(kept)
    outside = tmp_path / "elsewhere"
    (outside / "basics").mkdir(parents=True)
    (outside / "basics" / "basic_writing.yaml").write_text(SECRET)
    shutil.rmtree(scenario_criteria / "basics")
    (scenario_criteria / "basics").symlink_to(outside / "basics", target_is_directory=True)
    _refused(copy, sqlite_url, "resolves to", str(outside.resolve()), "outside the imported folder")

    # A scenario file that is a symlink to a file outside.
    shutil.rmtree(copy)
    copy, secret = _autoj_copy(tmp_path / "again")
    scenario = copy / "other_resources" / "scenario_criteria" / "specials" / "writing_email.yaml"
    planted = tmp_path / "planted.yaml"
    planted.write_text(scenario.read_text())
    scenario.unlink()
    scenario.symlink_to(planted)
    _refused(copy, sqlite_url, f"{scenario}: resolves to {planted.resolve()}, outside")
    assert _stored(sqlite_url) == (0, 0, 0, 0)


def test_autoj_links_and_roots_inside_still_import(sqlite_url: str, tmp_path: Path) -> None:
    copy, _ = _autoj_copy(tmp_path)
    scenario_criteria = copy / "other_resources" / "scenario_criteria"
    # A symlink that stays inside the root is followed.
    basics = scenario_criteria / "basics"
    (basics / "basic_writing.yaml").rename(basics / "writing.yaml")
    (basics / "basic_writing.yaml").symlink_to(basics / "writing.yaml")
    # Given the specials folder itself, the root is scenario_criteria, which holds the basics.
    imported = _ok(
        "rubrics",
        "import",
        "--format",
        "autoj",
        str(scenario_criteria / "specials"),
        database_url=sqlite_url,
    )
    assert "58 created, 0 new version(s), 0 unchanged (705 criteria)" in imported.stdout
