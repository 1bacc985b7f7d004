"""Subscribers choose a pipeline's streams from the metadata service: a set of ids, or a regex over ids.

A regex subscriber matches whole stream ids (``re.fullmatch``): ``orders-.*`` selects ``orders-eu`` but not
``old-orders-eu``. Flink's Dynamic Kafka Source matches partially; a full match is what a data engineer reading
``orders-.*`` expects, and it never picks up a stream by accident.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from dynamic_kafka.errors import UnknownStreamError

if TYPE_CHECKING:
    from dynamic_kafka.config.models import PipelineConfig
    from dynamic_kafka.metadata.models import KafkaStream
    from dynamic_kafka.metadata.service import KafkaMetadataService


class Subscriber(ABC):
    """Chooses streams."""

    @abstractmethod
    def subscribe(self, service: KafkaMetadataService) -> dict[str, KafkaStream]:
        """The subscribed streams as the service describes them now, by stream id."""


class StreamIdSubscriber(Subscriber):
    """A fixed set of stream ids. An id the service does not know is an error, not a silent empty read."""

    def __init__(self, stream_ids: tuple[str, ...] | list[str], *, source: str | None = None) -> None:
        self.stream_ids = tuple(dict.fromkeys(stream_ids))
        self._source = source

    def subscribe(self, service: KafkaMetadataService) -> dict[str, KafkaStream]:
        """Return the subscribed streams the service describes now, keyed by stream id."""
        found = service.describe_streams(self.stream_ids)
        missing = [i for i in self.stream_ids if i not in found]
        if missing:
            known = sorted(s.stream_id for s in service.get_all_streams())
            raise UnknownStreamError(missing, known, source=self._source)
        return found


class StreamPatternSubscriber(Subscriber):
    """Every stream whose id fully matches ``pattern``; none matching is a valid, empty subscription."""

    def __init__(self, pattern: str) -> None:
        self.pattern = re.compile(pattern)

    def subscribe(self, service: KafkaMetadataService) -> dict[str, KafkaStream]:
        """Return the subscribed streams the service describes now, keyed by stream id."""
        return {s.stream_id: s for s in service.get_all_streams() if self.pattern.fullmatch(s.stream_id)}


def subscriber_for(pipeline: PipelineConfig, *, source: str | None = None) -> Subscriber:
    """The subscriber a pipeline config asks for."""
    if pipeline.stream_pattern is not None:
        return StreamPatternSubscriber(pipeline.stream_pattern)
    assert pipeline.streams is not None  # guaranteed by PipelineConfig's validator
    return StreamIdSubscriber(pipeline.streams, source=source)
