"""The suite's resource markers follow what tests use: collection marks the users of a
resource's fixtures, and a test that reaches a resource unmarked fails, naming the marker.
`make test-fast` deselects by these markers, so a wrong one would make it slow or failing."""

from __future__ import annotations

import pytest

from tests.requirements import COLLECTED, CURRENT_TEST, FIXTURE_MARKERS, RESOURCE_MARKERS, uses


def test_every_collected_test_using_a_resource_fixture_carries_its_marker() -> None:
    users = 0
    for item in COLLECTED:
        for fixture in getattr(item, "fixturenames", ()):
            for marker in FIXTURE_MARKERS.get(fixture, ()):
                users += 1
                assert item.get_closest_marker(marker) is not None, (item.nodeid, marker)
    # Run alone, this file is all that is collected; with the suite (also `make test-fast`,
    # whose deselected tests are still collected) the fixtures have users.
    assert users > 0 or all(item.path == COLLECTED[0].path for item in COLLECTED)


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
