#!/usr/bin/env bash
# Builds a confluent-kafka whose librdkafka speaks SASL/GSSAPI (Kerberos), into .kerberos-client/ (optional; the
# wheel the project installs from PyPI is built without it). Everything comes from this machine's registries:
#   - librdkafka's source: the copy the npm package @confluentinc/kafka-javascript ships (deps/librdkafka);
#   - Cyrus SASL and MIT Kerberos: Debian's libsasl2-dev, libkrb5-dev, libsasl2-modules-gssapi-mit;
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

missing=()
for pkg in libsasl2-dev libkrb5-dev libsasl2-modules-gssapi-mit libssl-dev zlib1g-dev libzstd-dev liblz4-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "build-kerberos-client: missing Debian packages; install them first: apt-get install ${missing[*]}" >&2
  exit 2
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
  (cd "$src" && ./configure --prefix="$OUT" --disable-curl --enable-gssapi >"$work/configure.log" && make libs && make install-subdirs)
fi
grep -aq "SASL_CYRUS" "$OUT/lib/librdkafka.so" || {
  echo "build-kerberos-client: librdkafka was built without Cyrus SASL (GSSAPI); see $work/configure.log" >&2
  exit 4
}
"$PYTHON" -m pip --version >/dev/null 2>&1 && PIP=("$PYTHON" -m pip) || PIP=(pip)
CFLAGS="-I$OUT/include" LDFLAGS="-L$OUT/lib -Wl,-rpath,$OUT/lib" \
  "${PIP[@]}" wheel --no-deps --no-binary confluent-kafka "confluent-kafka==$CONFLUENT_KAFKA_VERSION" -w "$work/wheels"
rm -rf "$OUT/site"
"${PIP[@]}" install --no-deps --target "$OUT/site" "$work/wheels/confluent_kafka-$CONFLUENT_KAFKA_VERSION"-*.whl
PYTHONPATH="$OUT/site" "$PYTHON" - <<'PY'
from confluent_kafka import Consumer
# A GSSAPI consumer is refused at creation by a librdkafka without it ("No provider for SASL mechanism GSSAPI").
Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "probe", "security.protocol": "SASL_PLAINTEXT",
          "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true"}).close()
PY
echo "build-kerberos-client: ready; run with PYTHONPATH=$OUT/site"
