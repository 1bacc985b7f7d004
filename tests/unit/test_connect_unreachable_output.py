"""An unreachable Spark Connect server is one product error on stderr, without pyspark's own retry warning."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from dynamic_kafka._toolchain.process import free_port

_PROBE = textwrap.dedent(
    """
    import sys
    from dynamic_kafka.config.models import SparkConfig
    from dynamic_kafka.errors import SparkConnectUnavailableError
    from dynamic_kafka.spark.session import build_spark_session

    settings = SparkConfig(remote=f"sc://127.0.0.1:{sys.argv[1]}", remote_retries=1, remote_max_backoff_ms=50)
    try:
        build_spark_session(settings)
    except SparkConnectUnavailableError as error:
        print(type(error).__name__)
    """
)


def test_an_unreachable_server_shows_no_raw_retries_exceeded_warning() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(free_port())], capture_output=True, text=True, timeout=120, check=False
    )

    assert done.stdout.strip() == "SparkConnectUnavailableError", done.stderr
    # The product's error says the server did not answer; pyspark's warning only repeats it, with its own source line.
    assert "RETRIES_EXCEEDED" not in done.stderr
    assert "UserWarning" not in done.stderr
