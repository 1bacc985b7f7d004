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

from devtools.testing.browser import HeadlessChromium
from devtools.testing.dagster_ui import asset_url, open_lineage, open_partitions, show_metadata_plots
from dynamic_kafka.dagster.translator import DynamicKafkaTranslator

PIPELINE = "orders"
STREAM = "orders"  # the stream the pipeline reads (the lineage picture starts there)
# Metadata labels of the demo's runs the plots picture shows (the demo lands on both clusters).
PLOTTED = ["records/east", "records/west", "dagster/row_count"]
# The charts draw after their data arrives; this lets their animation end before the picture.
SETTLE_S = 2.0


def take(port: int, out: Path) -> list[Path]:
    """Shoot the lineage, the sink's plotted metadata and the backfill's partitions; return the files written."""
    base = f"http://127.0.0.1:{port}"
    keys = DynamicKafkaTranslator()
    sink, backfill, stream = (
        keys.asset_key(PIPELINE),
        keys.backfill_asset_key(PIPELINE),
        keys.stream_asset_key(STREAM),
    )
    dead_letter = keys.dead_letter_asset_key(PIPELINE)
    written = []
    with tempfile.TemporaryDirectory() as profile, HeadlessChromium(Path(profile), height=1000) as browser:
        # 1. The stream and the three assets it feeds (its downstream lineage).
        fed = [k.path[-1] for k in (sink, backfill, dead_letter)]
        open_lineage(browser, base, stream.path, ["kafka_streams", *fed], statuses=["Materialized", "filled"])
        written.append(_shot(browser, out / "asset-graph.png"))

        # 2. The sink's metadata over the demo's runs, as plots: their titles, and the charts drawn.
        browser.open(asset_url(base, sink.path), wait_for=["Metadata", "Plots", "records/east"])
        show_metadata_plots(browser, PLOTTED, charts=len(PLOTTED))
        browser.scroll_to_text("Metadata")
        written.append(_shot(browser, out / "asset-plots.png"))

        # 3. The backfill asset's partitions, the backfilled days filled.
        open_partitions(browser, base, backfill.path, ["Materialized (3)", "Missing (4)"])
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
