"""The code location dg loads (``code_location_target_module``): every component under ``defs/``."""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    """Return the definitions of the components under ``defs/``."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
