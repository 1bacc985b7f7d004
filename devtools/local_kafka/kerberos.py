"""A local MIT Kerberos KDC for a local broker's SASL/GSSAPI listener (``local-kafka up --kerberos``).

The KDC is Debian's ``krb5-kdc`` (``krb5kdc``, ``kdb5_util``, ``kadmin.local``), one per cluster, on a free
loopback port, with its realm ``DK.LOCAL`` and database under the cluster's folder. At the first ``up`` it gets two
principals with random keys, exported to keytabs: the broker's ``kafka/localhost`` and the client's
``CLIENT@DK.LOCAL``. Nothing has a password a person types: the database's master key is random, given to
``kdb5_util`` on stdin and kept in the KDC's 0600 stash file only.

Layout under the cluster's folder::

    kerberos/krb5.conf        the client configuration (realm -> KDC address): $KRB5_CONFIG for librdkafka's
                              kinit, -Djava.security.krb5.conf for the broker and Spark
    kerberos/kafka.keytab     the broker's keytab (kafka/localhost@DK.LOCAL)
    kerberos/client.keytab    the client's keytab (CLIENT@DK.LOCAL)
    kerberos/kdc/             the KDC's database, stash, kdc.conf, pid and log

The listener is advertised as ``localhost`` (not ``127.0.0.1``): a Kerberos client asks for a ticket to
``kafka/<the host it connects to>``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from devtools.errors import LocalKafkaError
from dynamic_kafka._toolchain import process

REALM = "DK.LOCAL"
SERVICE_NAME = "kafka"
HOST = "localhost"
CLIENT_PRINCIPAL = "reader"
_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")
_INSTALL_HINT = "Install Debian's MIT Kerberos: `apt-get install krb5-kdc krb5-user`."


def kerberos_dir(cluster_dir: Path) -> Path:
    """The folder of a cluster's KDC, keytabs and krb5.conf."""
    return cluster_dir / "kerberos"


def broker_jaas(cluster_dir: Path) -> str:
    """The broker listener's JAAS line: its service principal from its keytab (a path, no secret)."""
    keytab = kerberos_dir(cluster_dir) / "kafka.keytab"
    return (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        f'keyTab="{keytab}" principal="{SERVICE_NAME}/{HOST}@{REALM}";'
    )


def prepare_kdc(cluster_dir: Path, kdc_port: int) -> None:
    """Writes the KDC's and the clients' configuration for ``kdc_port`` and, at the first call, creates the
    database, the two principals and their keytabs.

    Raises:
        LocalKafkaError: a Kerberos tool is missing or failed (the message holds its output, which holds no key).
    """
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]
    if missing:
        raise LocalKafkaError(f"--kerberos needs MIT Kerberos' {', '.join(missing)}.", hint=_INSTALL_HINT)
    folder = kerberos_dir(cluster_dir)
    kdc = folder / "kdc"
    kdc.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    (folder / "krb5.conf").write_text(
        "[libdefaults]\n"
        f" default_realm = {REALM}\n dns_lookup_realm = false\n dns_lookup_kdc = false\n rdns = false\n"
        " udp_preference_limit = 1\n"  # TCP only: the KDC listens on one TCP port
        f"[realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{kdc_port}\n }}\n"
    )
    (kdc / "kdc.conf").write_text(
        f"[kdcdefaults]\n kdc_listen = 127.0.0.1:{kdc_port}\n kdc_tcp_listen = 127.0.0.1:{kdc_port}\n"
        f"[realms]\n {REALM} = {{\n  database_name = {kdc / 'principal'}\n  key_stash_file = {kdc / 'stash'}\n"
        f"  kdc_listen = 127.0.0.1:{kdc_port}\n  kdc_tcp_listen = 127.0.0.1:{kdc_port}\n }}\n"
        f"[logging]\n kdc = FILE:{kdc / 'kdc.log'}\n"
    )
    if (folder / "client.keytab").is_file():
        return
    master_key = secrets.token_urlsafe(24)
    _run(["kdb5_util", "create", "-s", "-r", REALM], cluster_dir, stdin=f"{master_key}\n{master_key}\n")
    for principal, keytab in ((f"{SERVICE_NAME}/{HOST}", "kafka.keytab"), (CLIENT_PRINCIPAL, "client.keytab")):
        _run(["kadmin.local", "-q", f"addprinc -randkey {principal}@{REALM}"], cluster_dir)
        _run(["kadmin.local", "-q", f"ktadd -k {folder / keytab} {principal}@{REALM}"], cluster_dir)
        (folder / keytab).chmod(0o600)


def start_kdc(cluster_dir: Path) -> int:
    """Starts the cluster's KDC (detached, in the foreground of its own session); returns its pid."""
    kdc = kerberos_dir(cluster_dir) / "kdc"
    argv = [_tool("krb5kdc"), "-n", "-P", str(kdc / "kdc.pid")]
    return process.spawn_detached(argv, log_file=kdc / "krb5kdc.log", cwd=kdc, env=_env(cluster_dir))


def kdc_marker(cluster_dir: Path) -> str:
    """What the KDC's command line holds, so a reused pid never counts as this cluster's KDC."""
    return str(kerberos_dir(cluster_dir) / "kdc" / "kdc.pid")


def _env(cluster_dir: Path) -> dict[str, str]:
    folder = kerberos_dir(cluster_dir)
    return {
        **os.environ,
        "KRB5_CONFIG": str(folder / "krb5.conf"),
        "KRB5_KDC_PROFILE": str(folder / "kdc" / "kdc.conf"),
    }


def _tool(name: str) -> str:
    found = shutil.which(name)
    return found if found is not None else str(Path("/usr/sbin", name))


def _run(argv: list[str], cluster_dir: Path, *, stdin: str | None = None) -> None:
    # The master key travels on stdin only; every argument here is a fixed word, a principal or a path.
    try:
        result = subprocess.run(
            [_tool(argv[0]), *argv[1:]],
            input=stdin if stdin is not None else "",
            env=_env(cluster_dir),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LocalKafkaError(f"making the local KDC: `{argv[0]}` could not run ({e}).", hint=_INSTALL_HINT) from e
    if result.returncode != 0:
        raise LocalKafkaError(
            f"making the local KDC: `{argv[0]}` failed (exit {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()[-2000:]}"
        )
