"""A table per stream: ``sink.path`` as a template such as ``data/{stream}`` or ``s3://lake/raw/{stream}``.

The one placeholder is ``{stream}``: a stream's table is the template with the stream id in its place, and so is its
dead-letter table (``<table>_dead_letter`` unless ``dead_letter_path`` is a template of its own). The pipeline's state
stays one table (its offsets, its runs), by default ``_<pipeline id>_state`` in the folder that holds the stream
tables: a stream id starts with a letter or digit (:func:`check_stream_id`), so no stream's table can be it.

Pure functions over locations; the config validates with them and the runner fills them.

Example:
    >>> from dynamic_kafka.storage import parse_location
    >>> fill(parse_location("s3://lake/raw/{stream}"), "orders").uri
    's3://lake/raw/orders'
    >>> template_root(parse_location("s3://lake/raw/{stream}/v1")).uri
    's3://lake/raw'
"""

from __future__ import annotations

import re
import string

from dynamic_kafka.errors import ConfigError
from dynamic_kafka.storage import TableLocation, parse_location

PLACEHOLDER = "{stream}"

# A stream id becomes one path segment: letters, digits, '.', '_' and '-', starting with a letter or digit (no
# hidden or '..' segment, no separator, nothing a URI or Hadoop path must escape, such as ':', '%', '?' or spaces).
_PATH_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_SEGMENT = 255


def placeholders(text: str) -> list[str]:
    """The placeholders ``text`` names, in order (``[]`` for a plain location).

    Raises:
        ValueError: a brace that opens or closes no placeholder, or a placeholder other than ``{stream}`` (with a
            format spec or conversion too); the message says what to write.
    """
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as e:
        raise ValueError(
            f"{text!r} has an unmatched brace ({e}); the only placeholder is {PLACEHOLDER}, e.g. data/{PLACEHOLDER}"
        ) from None
    names: list[str] = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name != "stream" or spec or conversion:
            written = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(
                f"{text!r} has the unknown placeholder {written}; the only placeholder is {PLACEHOLDER} (each "
                f"stream's id), e.g. data/{PLACEHOLDER}"
            )
        names.append(name)
    return names


def is_template(location: TableLocation) -> bool:
    """Whether ``location`` names a table per stream (its text holds ``{stream}``)."""
    return PLACEHOLDER in location.uri


def check_stream_id(stream_id: str, *, template: str) -> None:
    """Refuses a stream id that cannot be one path segment of a table location.

    Raises:
        ConfigError: the id holds a character a path cannot take as is, starts with '.', '_' or '-', or is too long.
    """
    if _PATH_SAFE.fullmatch(stream_id) and len(stream_id) <= _MAX_SEGMENT:
        return
    bad = sorted({c for c in stream_id if not re.fullmatch(r"[A-Za-z0-9._-]", c)})
    why = (
        f"it holds {', '.join(repr(c) for c in bad)}"
        if bad
        else "it is longer than 255 characters"
        if len(stream_id) > _MAX_SEGMENT
        else "it does not start with a letter or digit"
    )
    raise ConfigError(
        f"stream {stream_id!r} cannot name a table of sink.path {template!r}: {why}. A stream's table is the template "
        "with the stream id in place of {stream}, one folder name of letters, digits, '.', '_' and '-', starting "
        "with a letter or digit; nothing was written.",
        hint="Rename the stream in the metadata service, leave it out of the subscription (`streams:` or "
        "`stream_pattern:`), or land it with a pipeline whose sink.path has no {stream}.",
    )


def fill(location: TableLocation, stream_id: str) -> TableLocation:
    """The table of ``stream_id`` under the template ``location`` (checked: :func:`check_stream_id`)."""
    check_stream_id(stream_id, template=location.uri)
    return parse_location(location.uri.replace(PLACEHOLDER, stream_id))


def template_root(location: TableLocation) -> TableLocation:
    """The folder holding every table of the template: the location up to the segment naming ``{stream}``."""
    head = location.uri.split(PLACEHOLDER, 1)[0]
    root = head.rsplit("/", 1)[0] if "/" in head else head
    return parse_location(root or "/")


def default_state(location: TableLocation, pipeline_id: str) -> TableLocation:
    """The state's default location for a template sink: ``_<pipeline id>_state`` beside the stream tables."""
    root = template_root(location)
    return parse_location(f"{root.uri.rstrip('/')}/_{pipeline_id}_state")
