"""Real local Schema Registries for demos, tests and benchmarks: Apicurio Registry with its Confluent-compatible API.

The registry runs from Apicurio's distribution on Maven Central, fetched once (checksum verified) and cached; it
runs on the machine's Java 17+, detached, on 127.0.0.1, and survives the process that started it. Clients use
``LocalRegistry.url`` (``http://127.0.0.1:PORT/apis/ccompat/v7``) as a Confluent Schema Registry URL.

Example:
    >>> from devtools.local_registry import start_registries, stop_registries
    >>> registries = start_registries([("east", 18081), ("west", 28081)])  # doctest: +SKIP
    >>> registries["east"].url  # doctest: +SKIP
    'http://127.0.0.1:18081/apis/ccompat/v7'
    >>> stop_registries(purge=True)  # doctest: +SKIP
    ['east', 'west']
"""

from devtools.local_registry.distribution import DEFAULT_REGISTRY_VERSION, resolve_registry_distribution
from devtools.local_registry.models import CCOMPAT_PATH, LocalRegistry, RegistryStatus
from devtools.local_registry.registry import (
    PASSWORD_ENV,
    parse_basic_auth,
    parse_registry_spec,
    registry_status,
    resolve_base_dir,
    start_registries,
    stop_registries,
)

__all__ = [
    "CCOMPAT_PATH",
    "DEFAULT_REGISTRY_VERSION",
    "PASSWORD_ENV",
    "LocalRegistry",
    "RegistryStatus",
    "parse_basic_auth",
    "parse_registry_spec",
    "registry_status",
    "resolve_base_dir",
    "resolve_registry_distribution",
    "start_registries",
    "stop_registries",
]
