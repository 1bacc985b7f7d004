"""The docs' three UI screenshots (README, docs/deployment.md), taken by headless Chromium from a dagster-webserver
on the demo's instance.

``examples/demo/screenshot.sh`` starts the webserver (on ``.dagster-home`` after ``make demo``) and runs this with
its port and the output folder. Each page is shot once its text shows what the picture is for, so a page still
loading fails here instead of landing in docs/ as a blank picture.

Usage: .venv/bin/python examples/demo/screenshots.py PORT OUT_DIR
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from devtools.testing.browser import HeadlessChromium
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator

if TYPE_CHECKING:
    from dagster import AssetKey

PIPELINE = "orders"
# The charts draw after their data arrives; this lets their animation end before the picture.
SETTLE_S = 2.0


def asset_path(key: AssetKey) -> str:
    """The UI's path of an asset's page."""
    return "/assets/" + "/".join(key.path)


def take(port: int, out: Path) -> list[Path]:
    """Shoot the lineage, the sink's plotted metadata and the backfill's partitions; return the files written."""
    base = f"http://127.0.0.1:{port}"
    keys = DynamicKafkaTranslator()
    sink, backfill, stream = (
        keys.asset_key(PIPELINE),
        keys.backfill_asset_key(PIPELINE),
        keys.stream_asset_key(PIPELINE),
    )
    dead_letter = keys.dead_letter_asset_key(PIPELINE)
    written = []
    with tempfile.TemporaryDirectory() as profile, HeadlessChromium(Path(profile), height=1000) as browser:
        # 1. The stream and the three assets it feeds (its downstream lineage).
        browser.open(
            f"{base}{asset_path(stream)}?view=lineage&lineageScope=downstream",
            # The nodes' status rows ("Materialized", "42% filled") replace their "Loading..." once loaded.
            wait_for=["kafka_streams", *(k.path[-1] for k in (sink, backfill, dead_letter)), "Materialized", "filled"],
        )
        written.append(_shot(browser, out / "asset-graph.png"))

        # 2. The sink's metadata over the demo's runs, as plots (the toggle is page state, not a URL).
        browser.open(f"{base}{asset_path(sink)}", wait_for=["Metadata", "Plots", "records/east"])
        browser.click_button("Plots")
        # The plots' titles (row_count is a plot, not a table row) and the charts' x-axis title: they are drawn.
        browser.wait_for_text(["dagster/row_count", "records/west", "Timestamp"])
        browser.scroll_to_text("Metadata")
        written.append(_shot(browser, out / "asset-plots.png"))

        # 3. The backfill asset's partitions, the backfilled days filled.
        browser.open(f"{base}{asset_path(backfill)}?view=partitions", wait_for=["Materialized (3)", "Missing (4)"])
        written.append(_shot(browser, out / "backfill-partitions.png"))
    return written


def _shot(browser: HeadlessChromium, path: Path) -> Path:
    time.sleep(SETTLE_S)
    browser.screenshot(path)
    return path


def main() -> int:
    """Take the screenshots and print where they went."""
    port, out = int(sys.argv[1]), Path(sys.argv[2])
    for path in take(port, out):
        print(f"screenshot: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
