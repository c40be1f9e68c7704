"""One plugin file, written here, that imports ``rubricsvc.ext`` and nothing else of rubricsvc:
a toy backend (every criterion: P(yes) = 0.8, no model), a toy verdict mode (a per-criterion
probability under a question of its own) and a toy rubric format. With ``RUBRICSVC_PLUGINS``
naming it, each is used from the CLI, the API, a Celery worker and the verl adapter.

Every test writes the file under a module name of its own, so the process that loads it (the
CLI, the API app, the worker, the adapter) is seen to import it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from rubricsvc import db
from rubricsvc.config import BrokerSettings, DatabaseSettings, Settings
from rubricsvc.models import Score
from tests.cli_runner import cli_error, cli_ok, run_cli
from tests.workers_harness import MakeCluster, score_via_celery

REPO = Path(__file__).resolve().parents[2]
P_YES = 0.8
PROMPT = "toy-sleep"
RUBRIC_NAME = "toy/sleep"

PLUGIN_SOURCE = textwrap.dedent(
    '''
    """A toy plugin: a backend, a verdict mode and a rubric format, through rubricsvc.ext."""

    from __future__ import annotations

    from collections.abc import Sequence
    from functools import partial
    from pathlib import Path

    from rubricsvc import ext


    class ConstantBackend:
        """Every choice: P("Yes") = ``p_yes``; it decodes nothing."""

        name = "toy-ext-constant"

        def __init__(self, model: str = "constant", *, p_yes: float = 0.8) -> None:
            self.model = model
            self.p_yes = p_yes

        def generate(self, requests):
            return [ext.BackendError("the toy backend decodes nothing", retryable=False)] * len(
                requests
            )

        def choice_probs(self, requests):
            return [ext.ChoiceResult({"Yes": self.p_yes, "No": 1.0 - self.p_yes}, 10)] * len(
                requests
            )

        def close(self) -> None:
            pass


    def _verdict(key, result):
        return {key: ext.binary_from_probs(ext.probs_of(result))}


    class ToyProb(ext.PerCriterionMode):
        """P(yes) per criterion, asked in words of its own."""

        name = "toy-prob"
        template = "criterion_prob"
        decodes = False
        gives_probability = True
        wording = "toy-1"

        def calls(self, context, items):
            fields = ext.framed(context.completion)
            calls = []
            for item in items:
                question = (
                    f"Is this true of the response: {ext.judged(item.criterion.text)}? "
                    "Answer with one word: Yes or No."
                )
                chat = context.template.render(**fields, question=question)
                request = ext.ChoiceRequest(
                    chat, ext.YES_TOKENS + ext.NO_TOKENS, group=str(context.completion.id)
                )
                calls.append(ext.Call(request, (item.key,), partial(_verdict, item.key)))
            return calls


    def read_toy(path: Path) -> Sequence[ext.RubricSpec]:
        """``# name | prompt id | prompt text``, then ``+ criterion`` or ``- pitfall`` lines."""
        specs = []
        for block in path.read_text(encoding="utf-8").split("#")[1:]:
            head, *lines = block.strip().splitlines()
            name, prompt_id, prompt = (part.strip() for part in head.split("|"))
            criteria = [
                {"text": line[1:].strip(), "weight": 1 if line.startswith("+") else -1}
                for line in lines
                if line.strip()
            ]
            data = {"name": name, "prompt": {"external_id": prompt_id, "text": prompt}}
            specs.append(ext.RubricSpec.model_validate({**data, "criteria": criteria}))
        if not specs:
            raise ext.ValidationFailed(f"{path}: no toy rubrics")
        return specs


    ext.register_backend("toy-ext-constant", ConstantBackend)
    ext.register_mode(ToyProb())
    ext.register_rubric_format("toy", read_toy, about="a toy rubric format")
    '''
)

TOY_RUBRIC = f"""# {RUBRIC_NAME} | {PROMPT} | How do I sleep better?
+ Recommends a regular schedule
+ Mentions caffeine
"""
JUDGE = {
    "name": "toy",
    "backend": "toy-ext-constant",
    "model": "constant-0.8",
    "mode": "toy-prob",
    "backend_options": {"p_yes": P_YES},
}
ANSWERS = ["Keep a regular schedule and skip late coffee.", "Sleep whenever you like."]


@dataclass
class Plugin:
    module: str
    folder: Path
    env: dict[str, str]  # what a process needs to load it
    rubric: Path
    judges: Path
    completions: Path


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Plugin:
    module = f"toy_plugin_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / f"{module}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))  # for the commands run in this process
    rubric = tmp_path / "rubric.toy"
    rubric.write_text(TOY_RUBRIC, encoding="utf-8")
    judges = tmp_path / "judges.json"
    judges.write_text(json.dumps({"judges": [JUDGE]}), encoding="utf-8")
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        "".join(
            json.dumps({"prompt_external_id": PROMPT, "text": text, "external_id": f"c{i}"}) + "\n"
            for i, text in enumerate(ANSWERS)
        ),
        encoding="utf-8",
    )
    env = {
        "RUBRICSVC_PLUGINS": module,
        "PYTHONPATH": os.pathsep.join([str(folder), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return Plugin(module, folder, env, rubric, judges, completions)


def _prepare(plugin: Plugin, database_url: str, *, subprocess: bool = False) -> None:
    """The toy rubric imported in the toy format and approved, and the toy judge added."""
    for args in (
        ("rubrics", "import", str(plugin.rubric), "--format", "toy"),
        ("rubrics", "approve", RUBRIC_NAME),
        ("judges", "add", str(plugin.judges)),
    ):
        result = run_cli(*args, database_url=database_url, env=plugin.env, subprocess=subprocess)
        assert result.code == 0, result.stderr


def _stored_scores(url: str) -> list[tuple[str, float | None, str]]:
    engine = db.make_engine(url)
    try:
        with db.session_scope(engine) as session:
            rows = session.scalars(select(Score).order_by(Score.completion_id)).all()
            return [(r.aggregation, r.value, r.status) for r in rows]
    finally:
        engine.dispose()


def test_the_plugin_imports_nothing_of_rubricsvc_but_ext() -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(PLUGIN_SOURCE)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    ours = {name for name in imported if name.split(".")[0] == "rubricsvc"}
    assert ours == {"rubricsvc", "rubricsvc.ext"}  # ``from rubricsvc import ext``


def test_the_plugin_works_from_the_cli(plugin: Plugin, sqlite_url: str) -> None:
    refused = cli_error(
        "rubrics",
        "import",
        str(plugin.rubric),
        "--format",
        "nope",
        database_url=sqlite_url,
        env=plugin.env,
    )
    assert "no rubric format 'nope'" in refused and "toy" in refused  # the plugin's is listed
    _prepare(plugin, sqlite_url)
    assert plugin.module in sys.modules  # loaded by the command, from RUBRICSVC_PLUGINS
    cli_ok("completions", "add", str(plugin.completions), database_url=sqlite_url, env=plugin.env)

    report = cli_ok(
        "score",
        "--judge",
        "toy",
        "--via",
        "inprocess",
        "--json",
        database_url=sqlite_url,
        env=plugin.env,
    ).json()

    assert (report["judgments"], report["computed"], report["failed"]) == (4, 4, 0)
    for scored in report["scores"]:
        assert scored["status"] == "ok"
        assert [c["value"] for c in scored["criteria"]] == pytest.approx([P_YES, P_YES])


@pytest.mark.slow  # 5-20 s here: left out of the inner loop (make test-fast), run by make test
def test_the_plugin_works_from_the_api(plugin: Plugin, sqlite_url: str) -> None:
    from fastapi.testclient import TestClient

    from rubricsvc.api import create_app
    from rubricsvc.apikeys import Scope, create_key

    _prepare(plugin, sqlite_url, subprocess=True)  # this process has not loaded the plugin
    engine = db.make_engine(sqlite_url)
    with db.session_scope(engine) as session:
        key = create_key(session, "toy", [Scope.SCORE.value]).secret
    assert plugin.module not in sys.modules
    settings = Settings(
        db=DatabaseSettings(url=sqlite_url),
        broker=BrokerSettings(url=None),
        plugins=[plugin.module],
    )
    app = create_app(settings, engine)
    assert plugin.module in sys.modules
    with TestClient(app) as client:
        answer = client.post(
            "/v1/rewards",
            json={
                "judge": "toy",
                "items": [{"prompt_id": PROMPT, "completion": text} for text in ANSWERS],
            },
            headers={"Authorization": f"Bearer {key}"},
        )
    engine.dispose()
    assert answer.status_code == 200, answer.text
    assert answer.json()["rewards"] == pytest.approx([P_YES, P_YES])


@pytest.mark.postgres
@pytest.mark.broker
@pytest.mark.slow
def test_the_plugin_works_on_a_celery_worker(plugin: Plugin, make_cluster: MakeCluster) -> None:
    cluster = make_cluster("redis", **plugin.env)
    for args in (
        ("rubrics", "import", str(plugin.rubric), "--format", "toy"),
        ("rubrics", "approve", RUBRIC_NAME),
        ("judges", "add", str(plugin.judges)),
        ("completions", "add", str(plugin.completions)),
    ):
        result = cluster.cli(*args)
        assert result.code == 0, result.stderr
    cluster.start_worker("toy").wait_ready(timeout=120)

    job = score_via_celery(cluster, "--prompt", PROMPT, judge="toy").json()

    assert (job["judgments"], job["computed"], job["failed"]) == (4, 4, 0)
    scores = _stored_scores(cluster.database_url)
    assert len(scores) == 2
    assert all(status == "ok" and value == pytest.approx(P_YES) for _, value, status in scores)


VERL_CALL = """
import json, sys
from tests.verl_reward_loop import get_custom_reward_fn, verl_import_utils

def load_extern_object(module_path, object_name):  # what verl's does, when verl is absent
    import importlib.util
    spec = importlib.util.spec_from_file_location("custom_module", module_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    spec.loader.exec_module(module)
    return getattr(module, object_name)

utils = verl_import_utils()
config = json.loads(sys.argv[1])
compute_score = get_custom_reward_fn(config, utils.load_extern_object if utils else load_extern_object)
before = sys.argv[2] in sys.modules
result = compute_score(
    data_source="rubrics", solution_str=sys.argv[3], ground_truth=sys.argv[4], extra_info={}
)
print(json.dumps({"loaded_before": before, "loaded_after": sys.argv[2] in sys.modules, **result}))
"""


@pytest.mark.slow  # 5-20 s here: left out of the inner loop (make test-fast), run by make test
def test_the_plugin_works_in_the_verl_adapter(plugin: Plugin, sqlite_url: str) -> None:
    """verl loads the adapter by path in a process of its own; the first reward it asks for
    loads the plugin and scores with the toy judge in that process."""
    _prepare(plugin, sqlite_url, subprocess=True)
    config = {
        "reward": {
            "custom_reward_function": {
                "path": str(REPO / "trainer/adapters/verl.py"),
                "name": "compute_score",
                "reward_kwargs": {"judge": "toy", "mode": "toy-prob", "via": "inprocess"},
            }
        }
    }
    proc = subprocess.run(
        [sys.executable, "-c", VERL_CALL, json.dumps(config), plugin.module, ANSWERS[0], PROMPT],
        capture_output=True,
        text=True,
        env={**os.environ, **plugin.env, "RUBRICSVC_DATABASE_URL": sqlite_url},
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["loaded_before"], result["loaded_after"]) == (False, True)
    assert (result["score"], result["masked"]) == (pytest.approx(P_YES), 0.0)
