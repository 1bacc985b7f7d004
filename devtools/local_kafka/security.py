"""Secured listeners for a local broker: TLS, mutual TLS, SASL/SCRAM over TLS, SASL/OAUTHBEARER (unsecured JWT),
SASL/GSSAPI (Kerberos, with a local KDC: :mod:`devtools.local_kafka.kerberos`).

Each mode is one more listener of the same broker on its own loopback port, so one broker serves every mode (a
test session starts one, not one per mode). The ``CLIENT`` listener stays as it was (PLAINTEXT or SASL/PLAIN) and
remains the inter-broker listener, so no secured listener needs broker credentials of its own.

Certificates are made at ``up`` with the machine's ``openssl`` (a self-signed CA, a broker certificate for
``127.0.0.1``/``localhost`` and a client certificate) and exported with ``keytool`` into PKCS12 and JKS stores, so
every client form can be tried: PEM files (librdkafka and Java), PKCS12 (both) and JKS (Java only). The stores'
password is random, kept in a 0600 file, and given to openssl and keytool by file name, never on a command line.

Layout under the cluster's folder::

    tls/ca.pem  tls/ca.key                    the CA (the key only signs the two certificates below)
    tls/broker.pem                            the broker's key and certificate (its PEM key store)
    tls/client.pem                            the client's key and certificate (mutual TLS), one file
    tls/client.p12  tls/truststore.p12        PKCS12 key store and trust store
    tls/client.jks  tls/truststore.jks        the same as JKS
    tls/store-password                        their password (mode 0600)
"""

from __future__ import annotations

import re
import secrets
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from devtools.errors import LocalKafkaError
from devtools.local_kafka.kerberos import HOST as KERBEROS_HOST
from devtools.local_kafka.kerberos import SERVICE_NAME as KERBEROS_SERVICE_NAME
from devtools.local_kafka.kerberos import broker_jaas

Mode = Literal["tls", "mtls", "scram", "oauthbearer", "kerberos"]
LISTENERS: dict[Mode, tuple[str, str]] = {
    "tls": ("TLS", "SSL"),
    "mtls": ("MTLS", "SSL"),
    "scram": ("SCRAM", "SASL_SSL"),
    "oauthbearer": ("OAUTH", "SASL_PLAINTEXT"),
    "kerberos": ("GSSAPI", "SASL_PLAINTEXT"),
}
"""Mode -> (listener name, security protocol)."""
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_PASSWORD_ENV = "DYNAMIC_KAFKA_SCRAM_PASSWORD"  # noqa: S105 (the variable's name, not a password)
_SCRAM_USER_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
_STORE_PASSWORD_FILE = "store-password"  # noqa: S105 (a file name)
_OAUTH_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="broker";'
)
_SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


class SecurityModes(BaseModel):
    """Which secured listeners a local broker gets besides its ``CLIENT`` listener. Holds no secret."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tls: bool = Field(default=False, description="A TLS listener (server certificate only).")
    mtls: bool = Field(default=False, description="A TLS listener that requires a client certificate.")
    scram_user: str | None = Field(default=None, description="A SASL_SSL listener with SCRAM-SHA-512 for this user.")
    oauthbearer: bool = Field(default=False, description="A SASL_PLAINTEXT listener with OAUTHBEARER (unsecured JWT).")
    kerberos: bool = Field(default=False, description="A SASL_PLAINTEXT listener with GSSAPI, and a local KDC.")

    @property
    def modes(self) -> list[Mode]:
        """The requested modes, in listener order."""
        wanted: dict[Mode, bool] = {
            "tls": self.tls,
            "mtls": self.mtls,
            "scram": self.scram_user is not None,
            "oauthbearer": self.oauthbearer,
            "kerberos": self.kerberos,
        }
        return [mode for mode, on in wanted.items() if on]

    @property
    def needs_certificates(self) -> bool:
        """Whether any listener uses TLS."""
        return self.tls or self.mtls or self.scram_user is not None


def validate_scram_user(user: str) -> None:
    """Raises LocalKafkaError unless ``user`` is 1-64 letters, digits or ``_``; never echoes a ``user:password``."""
    if ":" in user:
        raise LocalKafkaError(
            "--scram takes the user only: a password on the command line is visible to every user in the process "
            f"list. Put the password in ${SCRAM_PASSWORD_ENV} or pipe it on stdin."
        )
    if not _SCRAM_USER_RE.fullmatch(user):
        raise LocalKafkaError(f"invalid SCRAM user {user!r}; use 1-64 letters, digits or _.")


def listener_host(mode: Mode) -> str:
    """The host a mode's listener is advertised as: ``127.0.0.1``, but ``localhost`` for Kerberos, whose clients
    ask for a ticket to ``kafka/<the host they connect to>``, the broker's principal.
    """
    return KERBEROS_HOST if mode == "kerberos" else "127.0.0.1"


def listener_settings(
    modes: SecurityModes, ports: dict[Mode, int], tls_dir: Path
) -> tuple[list[str], list[str], dict[str, str]]:
    """The broker's extra listeners (``NAME://127.0.0.1:PORT``), their ``NAME:PROTOCOL`` pairs and the settings
    they need. Holds no secret: the broker's PEM key is unencrypted in a 0600 file, its Kerberos key in a 0600
    keytab (in ``kerberos/`` beside ``tls_dir``).
    """
    listeners: list[str] = []
    settings: dict[str, str] = {}
    protocols: list[str] = []
    for mode in modes.modes:
        name, protocol = LISTENERS[mode]
        listeners.append(f"{name}://{listener_host(mode)}:{ports[mode]}")
        protocols.append(f"{name}:{protocol}")
    if modes.needs_certificates:
        settings.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(tls_dir / "broker.pem"),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls_dir / "ca.pem"),
            }
        )
    if modes.mtls:
        settings["listener.name.mtls.ssl.client.auth"] = "required"
    if modes.scram_user is not None:
        settings["listener.name.scram.sasl.enabled.mechanisms"] = SCRAM_MECHANISM
        settings["listener.name.scram.scram-sha-512.sasl.jaas.config"] = _SCRAM_JAAS
    if modes.oauthbearer:
        settings["listener.name.oauth.sasl.enabled.mechanisms"] = "OAUTHBEARER"
        settings["listener.name.oauth.oauthbearer.sasl.jaas.config"] = _OAUTH_JAAS
    if modes.kerberos:
        settings["listener.name.gssapi.sasl.enabled.mechanisms"] = "GSSAPI"
        settings["listener.name.gssapi.gssapi.sasl.jaas.config"] = broker_jaas(tls_dir.parent)
        settings["sasl.kerberos.service.name"] = KERBEROS_SERVICE_NAME
    return listeners, protocols, settings


def store_password(tls_dir: Path) -> Path:
    """The file holding the PKCS12/JKS stores' password (made by :func:`make_certificates`)."""
    return tls_dir / _STORE_PASSWORD_FILE


def make_certificates(tls_dir: Path, keytool: Path, *, owner: str = "local broker") -> None:
    """Makes the CA, the broker's and the client's certificates and their stores under ``tls_dir``, unless they
    exist already (a restarted broker keeps them, and clients keep trusting it). ``owner`` names the server they
    are for in error messages (the local Schema Registry serves ``broker.pem``'s certificate too).

    Raises:
        LocalKafkaError: openssl or keytool failed (the message holds their output, which holds no password).
    """
    if (tls_dir / "truststore.jks").is_file():
        return
    tls_dir.mkdir(parents=True, exist_ok=True)
    tls_dir.chmod(0o700)
    password = store_password(tls_dir)
    password.touch(mode=0o600)
    password.write_text(secrets.token_urlsafe(18))
    san = tls_dir / "san.ext"
    san.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    keytool_pass = f"-storepass:file {password.name}"
    _run("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 -subj /CN=local-ca", tls_dir,
         owner)  # fmt: skip
    for who in ("broker", "client"):
        _run(f"openssl req -newkey rsa:2048 -nodes -keyout {who}.key -out {who}.csr -subj /CN={who}", tls_dir, owner)
        _run(
            f"openssl x509 -req -in {who}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {who}.crt -days 3650 "
            f"-extfile {san.name}",
            tls_dir,
            owner,
        )
        pem = tls_dir / f"{who}.pem"
        pem.touch(mode=0o600)
        pem.write_text((tls_dir / f"{who}.key").read_text() + (tls_dir / f"{who}.crt").read_text())
    _run(
        "openssl pkcs12 -export -in client.crt -inkey client.key -certfile ca.pem -name client -out client.p12 "
        f"-passout file:{password.name}",
        tls_dir,
        owner,
    )
    for kind in ("PKCS12", "JKS"):
        store = f"truststore.{'p12' if kind == 'PKCS12' else 'jks'}"
        _run(f"{keytool} -importcert -noprompt -alias ca -file ca.pem -keystore {store} -storetype {kind} "
             f"{keytool_pass}", tls_dir, owner)  # fmt: skip
    _run(
        f"{keytool} -importkeystore -srckeystore client.p12 -srcstoretype PKCS12 -srcstorepass:file {password.name} "
        f"-destkeystore client.jks -deststoretype JKS -deststorepass:file {password.name}",
        tls_dir,
        owner,
    )
    for key in tls_dir.glob("*.key"):
        key.chmod(0o600)


def _run(command: str, cwd: Path, owner: str) -> None:
    # Commands are built here from fixed words and file names under tls_dir: no quoting needed, no password.
    argv = command.split()
    try:
        result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LocalKafkaError(
            f"making the {owner}'s certificates: `{Path(argv[0]).name}` could not run ({e}).",
            hint="Install openssl and a JDK (keytool), e.g. `apt-get install openssl openjdk-17-jdk-headless`.",
        ) from e
    if result.returncode != 0:
        raise LocalKafkaError(
            f"making the {owner}'s certificates: `{Path(argv[0]).name} {argv[1]}` failed "
            f"(exit {result.returncode}): {(result.stdout + result.stderr).strip()[-2000:]}"
        )
