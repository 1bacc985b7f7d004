#!/usr/bin/env bash
# Sets up everything the project needs on a fresh machine, idempotently:
# Java 17, Maven, PostgreSQL and Chromium (Debian packages, only if missing), uv (from PyPI), and the locked
# virtual environment at .venv with the project installed in it.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION="0.13.9"
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
# Maven only builds the benchmark's Flink peer (bench/flink.py); the product and the tests fetch jars with Ivy.
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
# PostgreSQL for Dagster's storage (`python -m devtools local-postgres`); Debian keeps initdb/pg_ctl off PATH.
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || need_apt+=(postgresql)
# Headless Chromium for the UI screenshots (`make screenshot`) and the e2e test of the rendered UI pages.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]} from Debian's packages"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
"$PY" - <<'PYCHECK'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"setup: Python 3.11+ is required, found {sys.version.split()[0]}; set PYTHON=/path/to/python3.11")
PYCHECK

UV=".cache/uv/bin/uv"
if ! [ -x "$UV" ] || [ "$("$UV" --version | awk '{print $2}')" != "$UV_VERSION" ]; then
  echo "setup: installing uv $UV_VERSION"
  "$PY" -m venv .cache/uv
  .cache/uv/bin/pip install -q "uv==$UV_VERSION"
fi

"$UV" sync --frozen --all-extras --python "$PY" --quiet
# The project is installed editable, so its own modules are not in site-packages, which uv compiles
# (pyproject: compile-bytecode). Compile them too: a fresh run process reads bytecode instead of compiling.
.venv/bin/python -m compileall -q dynamic_kafka pipelines devtools >/dev/null
# The receivers the metrics tests send to, a Prometheus Pushgateway and an OpenTelemetry Collector: built from their
# Go modules into the shared cache (once: a few minutes, the Collector up to a quarter of an hour), so the tests'
# session starts them offline. Without Go the metrics tests build them themselves, or fail saying so.
GO="$(command -v go || true)"; [ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
if [ -n "$GO" ]; then
  PATH="$(dirname "$GO"):$PATH" .venv/bin/python -c \
    'from devtools.testing.pushgateway import pushgateway_binary; print("setup: pushgateway", pushgateway_binary())'
  PATH="$(dirname "$GO"):$PATH" .venv/bin/python -c \
    'from devtools.testing.collector import collector_binary; print("setup: otelcol", collector_binary())'
else
  echo "setup: no Go toolchain: the receivers of the metrics tests are not built (install Go, run setup again)"
fi
echo "setup: ready (.venv/bin/dynamic-kafka)"
