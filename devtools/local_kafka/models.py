"""What the local Kafka tooling records and returns: cluster endpoints, local clusters and their status."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from devtools.errors import LocalKafkaError


class ClusterEndpoint(BaseModel):
    """How clients reach one Kafka cluster: a name, its bootstrap servers and the SASL/PLAIN user it requires."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Logical name of the cluster.")
    bootstrap_servers: str = Field(description="What clients pass as bootstrap.servers.")
    sasl_user: str | None = Field(default=None, description="SASL/PLAIN user the client listener requires, if any.")

    def client_config(self, password: str | None = None) -> dict[str, str]:
        """Return confluent-kafka client settings for this cluster.

        Args:
            password: the SASL password; required when the cluster has a ``sasl_user``.

        Raises:
            LocalKafkaError: the cluster requires SASL and no password was given.
        """
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self.sasl_user is None:
            return config
        if password is None:
            raise LocalKafkaError(f"cluster {self.name!r} requires SASL/PLAIN; pass the password.")
        config.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": self.sasl_user,
                "sasl.password": password,
            }
        )
        return config


class LocalCluster(ClusterEndpoint):
    """One local single-node Kafka cluster, as recorded in its ``cluster.json``.

    Example:
        >>> from devtools.local_kafka import start_clusters
        >>> clusters = start_clusters([("east", 19092)])  # doctest: +SKIP
        >>> clusters["east"].bootstrap_servers  # doctest: +SKIP
        '127.0.0.1:19092'
    """

    port: int = Field(description="Client listener port on 127.0.0.1.")
    controller_port: int = Field(description="KRaft controller listener port on 127.0.0.1.")
    cluster_id: str = Field(description="Kafka cluster id, fixed when the data folder was formatted.")
    pid: int | None = Field(default=None, description="Broker process id at the last start.")
    kafka_version: str = Field(description="Kafka release the broker runs.")
    cluster_dir: Path = Field(description="The cluster's folder (config, pid, log, data).")
    secure_listeners: dict[str, str] = Field(
        default_factory=dict,
        description="Secured listeners by mode (tls, mtls, scram, oauthbearer, kerberos): their bootstrap servers.",
    )
    scram_user: str | None = Field(default=None, description="The SCRAM-SHA-512 user of the scram listener.")
    tls_dir: Path | None = Field(default=None, description="Certificates and stores for the TLS listeners.")
    kerberos_dir: Path | None = Field(
        default=None, description="The kerberos listener's krb5.conf, client.keytab (principal reader) and KDC."
    )
    kdc_pid: int | None = Field(default=None, description="The local KDC's process id at the last start.")
    log_file: Path = Field(description="The broker's log file.")


class ClusterStatus(BaseModel):
    """A local cluster and whether its broker process is running now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: LocalCluster = Field(description="The recorded cluster.")
    running: bool = Field(description="True if the recorded broker process is alive.")
