"""The published benchmark figures are the committed results files' figures.

docs/benchmarks.md's generated blocks and the README's headline block are written by
``python -m benchmarks.report`` from ``benchmarks/results/NAME-latest.json``; these tests
render them again from the committed files and compare, so a figure edited by hand, or a
results file changed without its pages (or the reverse), fails.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import report
from benchmarks.results import RESULTS, headline, spread


def committed_results() -> dict[str, dict[str, object]]:
    return {
        name: json.loads(path.read_text())
        for name in report.RENDERERS
        if (path := RESULTS / f"{name}-latest.json").exists()
    }


def test_every_benchmark_on_the_page_has_its_committed_results() -> None:
    on_page = {match.group(2) for match in report.BLOCK.finditer(report.DOC.read_text())}
    assert on_page == set(report.RENDERERS)
    missing = sorted(on_page - set(committed_results()))
    assert not missing, f"no committed results for {missing}: run `make bench`"


@pytest.mark.parametrize("name", sorted(report.RENDERERS))
def test_the_page_block_is_rendered_from_the_committed_results(name: str) -> None:
    result = committed_results().get(name)
    if result is None:
        pytest.fail(f"benchmarks/results/{name}-latest.json is not committed")
    blocks = {m.group(2): m.group(3) for m in report.BLOCK.finditer(report.DOC.read_text())}
    assert blocks[name] == report.render(name, result)


def test_the_readme_headlines_are_the_committed_results() -> None:
    readme = report.README.read_text()
    match = report.README_BLOCK.search(readme)
    assert match, "README.md has no <!-- headlines --> block"
    published = match.group(2)
    assert published == report.readme_headlines(RESULTS)
    # Every headline of every result is on the README, with its median and its spread.
    for result in committed_results().values():
        for figure in result.get("headlines", {}).values():
            assert report.headline_text(figure) in published
    assert published.strip(), "the README shows no headline figure"


def test_a_headline_is_the_median_with_the_smallest_and_largest_run() -> None:
    figure = headline([7.9, 6.1, 7.4], compares="a / b", at_least=3)
    assert (figure["median"], figure["min"], figure["max"]) == (7.4, 6.1, 7.9)
    assert figure["met"] is True
    assert report.headline_text(figure) == "7.4x [6.1x-7.9x] over 3 runs (target >= 3x: met)"
    slow = headline([1.2, 1.4, 1.3], compares="c / d", unit="ms", at_most=1.25)
    assert slow["met"] is False
    assert report.headline_text(slow) == (
        "1.3 ms [1.2 ms-1.4 ms] over 3 runs (target <= 1.25 ms: missed)"
    )
    assert spread([2.0, 1.0])["median"] == 1.5
    with pytest.raises(ValueError):
        spread([])
