"""The shared vLLM server (tests/shared_servers.py) outlives every one of its users: started
once per test process however many modules use it, alive for each test that uses it, in the
fixture structure of tests/integration/test_backend_contract.py (a parametrized module fixture
and a second module fixture, both asking for the server through ``getfixturevalue``), and
stopped when the session ends.

Run in a pytest of its own (pytester) with a stand-in server: Python's http.server answering the
health check, in place of vLLM, so that this test needs no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFTEST = """
import json, sys
from pathlib import Path

import pytest

pytest_plugins = ["tests.shared_servers"]
STARTS = []


def stand_in_command(self):
    # Serves a folder with a file named "health": its health check answers 200.
    return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
            "--directory", str(Path(self.log_path).parent), str(self.port)]


@pytest.fixture(scope="session", autouse=True)
def stand_in(tmp_path_factory):
    import tests.shared_servers as shared
    from tests.servers import VLLMServer

    patch = pytest.MonkeyPatch()
    patch.setattr(shared, "require_module", lambda module, extra: None)
    patch.setattr(shared, "prepared_model_dir", lambda: Path("model"))
    patch.setattr(VLLMServer, "command", stand_in_command)
    start = VLLMServer.start

    def counted_start(self, timeout=60):
        (Path(self.log_path).parent / "health").write_text("ok")
        STARTS.append(self)
        start(self, timeout=timeout)

    patch.setattr(VLLMServer, "start", counted_start)
    yield
    patch.undo()


def pytest_sessionfinish(session):
    record = {
        "starts": len(STARTS),
        "stopped": [server.process is None for server in STARTS],
    }
    Path("record.json").write_text(json.dumps(record))
"""

# The contract module's structure: the server asked for from inside module fixtures, one of
# them parametrized (its "openai" instance the server's user), tests interleaving both.
MODULE = """
import pytest

def backend_for(name, request):
    if name != "openai":
        return None
    return request.getfixturevalue("vllm_server")

@pytest.fixture(scope="module", params=["transformers", "vllm", "openai"])
def backend(request):
    yield backend_for(request.param, request)

@pytest.fixture(scope="module")
def openai_only(request):
    yield backend_for("openai", request)

def alive(server):
    assert server is None or server.process is not None and server.process.poll() is None

def test_contract(backend):
    alive(backend)

def test_openai_only_first(openai_only):
    alive(openai_only)

@pytest.mark.parametrize("family", ["chatml", "llama3", "gemma"])
def test_forged(backend, family):
    alive(backend)

def test_openai_only_last(openai_only):
    alive(openai_only)
"""


@pytest.mark.slow(seconds=20)  # inner pytest runs, one of them with xdist's processes
@pytest.mark.parametrize("processes", [0, 2])
def test_the_shared_vllm_server_outlives_all_its_users(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, processes: int
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the inner pytest imports tests.shared_servers
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_first=MODULE, test_second=MODULE)
    xdist = ["-p", "xdist", f"--numprocesses={processes}", "--dist=loadfile"] if processes else []
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *xdist)
    result.assert_outcomes(passed=2 * 14)
    record = json.loads((Path(pytester.path) / "record.json").read_text())
    if processes == 0:
        # One process, two modules: one server, stopped only when the session ended.
        assert record == {"starts": 1, "stopped": [True]}
