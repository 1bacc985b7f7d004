#!/usr/bin/env bash
# Builds a confluent-kafka whose librdkafka speaks SASL/GSSAPI (Kerberos), into .kerberos-client/ (optional; the
# wheel the project installs from PyPI is built without it). Everything comes from this machine's registries:
#   - librdkafka's source: the copy the npm package @confluentinc/kafka-javascript ships (deps/librdkafka);
#   - Cyrus SASL and MIT Kerberos: Debian's libsasl2-dev, libkrb5-dev, libsasl2-modules-gssapi-mit (installed when
#     missing, with the KDC's krb5-kdc, krb5-admin-server and krb5-user for `local-kafka up --kerberos`);
#   - confluent-kafka: its sdist from PyPI, of the release matching that librdkafka (confluent-kafka checks at
#     build time that librdkafka is at least its own version, so 2.16.x cannot build against 2.15.1).
# Use it with PYTHONPATH=.kerberos-client/site (it shadows the venv's confluent-kafka in that process only).
set -euo pipefail

NPM_PACKAGE="@confluentinc/kafka-javascript@1.10.1"   # ships librdkafka 2.15.1
LIBRDKAFKA_VERSION="2.15.1"
CONFLUENT_KAFKA_VERSION="2.15.1"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${KERBEROS_CLIENT_DIR:-$ROOT/.kerberos-client}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

# Idempotent: a client already built for this version is kept (make test calls this each time).
if [[ -f "$OUT/site/.built-$CONFLUENT_KAFKA_VERSION" ]]; then
  exit 0
fi

# The build's headers and libraries, Cyrus SASL's GSSAPI plugin for the client at run time, and the MIT KDC and
# kinit that `local-kafka up --kerberos` starts: Debian's packages, installed when missing.
missing=()
for pkg in libsasl2-dev libkrb5-dev libsasl2-modules-gssapi-mit libssl-dev zlib1g-dev libzstd-dev liblz4-dev \
  krb5-kdc krb5-admin-server krb5-user; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "build-kerberos-client: installing ${missing[*]} from Debian's packages"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work="$OUT/build"
mkdir -p "$work"
cd "$work"
if [[ ! -f "$OUT/lib/librdkafka.so" ]]; then
  npm pack --silent "$NPM_PACKAGE" >/dev/null
  rm -rf package && tar xzf confluentinc-kafka-javascript-*.tgz
  src=package/deps/librdkafka
  grep -q "#define RD_KAFKA_VERSION 0x020f01ff" "$src/src/rdkafka.h" || {
    echo "build-kerberos-client: $NPM_PACKAGE does not ship librdkafka $LIBRDKAFKA_VERSION" >&2
    exit 3
  }
  # Not configure.log in the source folder: mklove loads every ./configure.NAME there as a module.
  (cd "$src" && ./configure --prefix="$OUT" --disable-curl --enable-gssapi >"$work/configure.log" && make -j"$(nproc)" libs && make install-subdirs)
fi
grep -aq "SASL_CYRUS" "$OUT/lib/librdkafka.so" || {
  echo "build-kerberos-client: librdkafka was built without Cyrus SASL (GSSAPI); see $work/configure.log" >&2
  exit 4
}
# uv's .venv has no pip; the venv setup.sh made for uv (.cache/uv) has, on the same Python.
if "$PYTHON" -m pip --version >/dev/null 2>&1; then PIP=("$PYTHON" -m pip)
elif [[ -x "$ROOT/.cache/uv/bin/python" ]]; then PIP=("$ROOT/.cache/uv/bin/python" -m pip)
else PIP=(pip); fi
# The extension finds librdkafka relative to itself (site/confluent_kafka/ -> ../../lib), so the client still loads
# when the checkout moves. No wheel cache: pip keys a wheel built from the sdist by the sdist alone, so a cached build from
# another checkout (another rpath, or a librdkafka without GSSAPI) would be installed in place of this one.
rm -rf "$work/wheels"
CFLAGS="-I$OUT/include" LDFLAGS="-L$OUT/lib -Wl,-rpath,\$ORIGIN/../../lib" \
  "${PIP[@]}" wheel --no-cache-dir --no-deps --no-binary confluent-kafka "confluent-kafka==$CONFLUENT_KAFKA_VERSION" \
  -w "$work/wheels"
rm -rf "$OUT/site"
"${PIP[@]}" install --no-deps --target "$OUT/site" "$work/wheels/confluent_kafka-$CONFLUENT_KAFKA_VERSION"-*.whl
PYTHONPATH="$OUT/site" "$PYTHON" - <<'PY'
from confluent_kafka import Consumer
# A GSSAPI consumer is refused at creation by a librdkafka without it ("No provider for SASL mechanism GSSAPI").
Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "probe", "security.protocol": "SASL_PLAINTEXT",
          "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true"}).close()
PY
touch "$OUT/site/.built-$CONFLUENT_KAFKA_VERSION"
echo "build-kerberos-client: ready; run with PYTHONPATH=$OUT/site"
