"""A test session's Schema Registries: local Apicurio Registries on free ports, stopped and deleted afterwards."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from devtools.local_registry import LocalRegistry, start_registries, stop_registries
from devtools.testing.clusters import THROWAWAY_STOP_S, distinct_free_ports

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path


@contextlib.contextmanager
def local_test_registries(
    names: Sequence[str], base_dir: Path, *, basic_auth: tuple[str, str] | None = None, tls: bool = False
) -> Iterator[dict[str, LocalRegistry]]:
    """Start one local registry per name on free ports under ``base_dir`` (with basic auth and HTTPS if asked);
    stop and delete them afterwards.
    """
    specs = list(zip(names, distinct_free_ports(len(names)), strict=True))
    registries = start_registries(specs, base_dir=base_dir, basic_auth=basic_auth, tls=tls)
    try:
        yield registries
    finally:
        stop_registries(list(registries), base_dir=base_dir, purge=True, stop_timeout_s=THROWAWAY_STOP_S)
