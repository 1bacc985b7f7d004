"""The base of the library's value models: immutable, and refusing fields they do not declare."""

from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from collections.abc import Iterator

ModelT = TypeVar("ModelT", bound=BaseModel)


class FrozenModel(BaseModel):
    """A pydantic model whose instances never change (``frozen``) and whose input may hold no unknown field
    (``extra="forbid"``: a misspelt config key or a plan written by a newer version is refused, not dropped).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")


def replaced(model: ModelT, **fields: Any) -> ModelT:
    """``model`` with ``fields`` replaced, for the typed methods of the models (each names its fields once, beside
    their declarations). ``model_copy(update=...)`` that refuses a name the model does not declare, which
    ``model_copy`` would set silently where nothing reads it. Like ``model_copy``, the values are not validated
    again: the typed method that calls this states their types.

    Raises:
        TypeError: ``fields`` names a field the model does not have (a bug).
    """
    unknown = fields.keys() - type(model).model_fields.keys()
    if unknown:
        raise TypeError(f"{type(model).__name__} has no field {', '.join(sorted(unknown))}")
    return model.model_copy(update=fields)


@contextlib.contextmanager
def building_many() -> Iterator[None]:
    """Pause Python's cycle collector while the block builds (or parses) many frozen values at once.

    Every model is a few container objects the collector tracks, and it scans all of them again each time their
    number has grown by a quarter: planning 100,000 partitions spent about half its CPU time in those scans (27 full
    collections, measured with ``gc.callbacks``), though the values hold no reference cycle to find. Objects freed
    meanwhile are freed as always (reference counting); only cyclic garbage waits until the block ends. When the
    collector is already off (another block, or the application turned it off), it is left as it is.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
