"""The suite's resource markers follow what tests use: collection marks the users of a
resource's fixtures, and a test that reaches a resource unmarked fails, naming the marker.
`make test-fast` deselects by these markers, so a wrong one would make it slow or failing."""

from __future__ import annotations

import pytest

from tests.requirements import COLLECTED, CURRENT_TEST, FIXTURE_MARKERS, RESOURCE_MARKERS, uses


def test_every_collected_test_using_a_resource_fixture_carries_its_marker() -> None:
    for item in COLLECTED:  # the whole run's tests, also those `-m` deselected
        for fixture in getattr(item, "fixturenames", ()):
            for marker in FIXTURE_MARKERS.get(fixture, ()):
                assert item.get_closest_marker(marker) is not None, (item.nodeid, marker)


class _Item:
    """What the collection hook reads and writes of a test item."""

    def __init__(self, nodeid: str, fixtures: list[str]) -> None:
        self.nodeid = nodeid
        self.fixturenames = fixtures
        self.markers: list[str] = []

        self.slow_seconds: float | None = None  # slow(seconds=N)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        if name not in self.markers:
            return None
        if name == "slow" and self.slow_seconds is not None:
            return pytest.mark.slow(seconds=self.slow_seconds).mark
        return getattr(pytest.mark, name).mark

    def add_marker(self, name: str) -> None:
        self.markers.append(name)


def test_collection_marks_a_fixtures_users_and_puts_heavy_modules_first() -> None:
    from tests.conftest import pytest_collection_modifyitems

    light = _Item("tests/a.py::t", ["tmp_path"])
    cluster = _Item("tests/b.py::t", ["make_cluster"])
    cluster.markers.append("slow")
    saved = list(COLLECTED)
    try:
        items = [light, cluster]
        pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    finally:
        COLLECTED[:] = saved
    assert sorted(cluster.markers) == ["broker", "postgres", "slow"] and light.markers == []
    assert items == [cluster, light]


def test_slow_modules_that_declare_more_seconds_are_handed_out_first() -> None:
    from tests.conftest import pytest_collection_modifyitems

    short, long, longer, light = (
        _Item(f"tests/{name}.py::t", ["tmp_path"]) for name in ("a", "b", "c", "d")
    )
    for item, seconds in ((short, None), (long, 60), (longer, 120)):
        item.markers.append("slow")
        item.slow_seconds = seconds
    model = _Item("tests/e.py::t", ["tmp_path"])
    model.markers.append("model")
    saved = list(COLLECTED)
    try:
        items = [light, model, short, long, longer]
        pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    finally:
        COLLECTED[:] = saved
    assert items == [longer, long, short, model, light]


def test_fixture_markers_name_declared_markers(pytestconfig: pytest.Config) -> None:
    declared = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert set(RESOURCE_MARKERS) <= declared
    assert {m for markers in FIXTURE_MARKERS.values() for m in markers} <= set(RESOURCE_MARKERS)


def test_using_a_resource_without_its_marker_fails_naming_the_marker(
    request: pytest.FixtureRequest,
) -> None:
    assert CURRENT_TEST and CURRENT_TEST[-1] is request.node
    with pytest.raises(pytest.fail.Exception, match=r"not marked `broker`.*pytest\.mark\.broker"):
        uses("broker")


@pytest.mark.broker
def test_a_marked_test_may_use_its_resource() -> None:
    uses("broker")  # no failure: the test says what it needs
