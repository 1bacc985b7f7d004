"""The base of the library's value models: immutable, and refusing fields they do not declare."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    """A pydantic model whose instances never change (``frozen``) and whose input may hold no unknown field
    (``extra="forbid"``: a misspelt config key or a plan written by a newer version is refused, not dropped).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
