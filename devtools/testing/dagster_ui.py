"""The Dagster UI pages the docs' screenshots show, and when each is ready: one definition for the screenshot script
(``examples/demo/screenshots.py``) and the e2e test that renders the same pages in the suite
(``tests/e2e/test_deployment.py``), so a Dagster UI change that breaks a wait fails the suite, not the next person's
``make screenshot`` (docs/decisions/0090-screenshots-checked-by-the-suite.md).

Each function loads a page and waits until it shows what its picture is for; what it waits for is page text,
except charts, which draw on canvases (their titles and axes are no page text).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from devtools.testing.browser import HeadlessChromium


def asset_url(base: str, path: Sequence[str]) -> str:
    """The UI's page of the asset whose key is ``path`` (``base``: ``http://127.0.0.1:PORT``)."""
    return f"{base}/assets/{'/'.join(path)}"


def open_lineage(
    browser: HeadlessChromium, base: str, source: Sequence[str], names: Sequence[str], statuses: Sequence[str]
) -> str:
    """The downstream lineage of asset ``source``, once the nodes ``names`` show and their status rows hold
    ``statuses`` ("Materialized" for a materialized asset, "filled" for a partitioned one: they replace the nodes'
    "Loading..." once loaded); returns the page's text.
    """
    url = f"{asset_url(base, source)}?view=lineage&lineageScope=downstream"
    return browser.open(url, wait_for=[*names, *statuses])


def show_metadata_plots(browser: HeadlessChromium, labels: Sequence[str], charts: int) -> str:
    """On an asset's page that shows its metadata table, switch to its metadata over its materializations as plots
    (the toggle is page state, not a URL), once the ``labels`` titles show and at least ``charts`` charts drew;
    returns the page's text.
    """
    browser.click_button("Plots")
    shown = browser.wait_for_text(labels)
    browser.wait_for_drawn_canvases(charts)
    return shown


def open_partitions(browser: HeadlessChromium, base: str, asset: Sequence[str], shown: Sequence[str]) -> str:
    """The asset's partitions view, once it shows ``shown`` (``"Materialized (3)"``); returns the page's text."""
    return browser.open(f"{asset_url(base, asset)}?view=partitions", wait_for=shown)
