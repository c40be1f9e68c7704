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

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None

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
