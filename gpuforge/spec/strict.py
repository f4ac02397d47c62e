"""The base of every spec model: unknown keys are errors, values are immutable, and no string
holds a control character or line break; and the one name pattern most names share."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME = r"^[a-z][a-z0-9_-]{0,62}$"
Name = Annotated[str, Field(pattern=NAME)]


class StrictModel(BaseModel):
    """Base for spec models: unknown keys are errors, values are immutable, and no string
    anywhere in a spec holds a control character or line break (none may add a line to a file)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, v: object) -> object:
        _refuse_control(v)
        return v


def _refuse_control(v: object) -> None:
    if isinstance(v, str):
        bad = next((c for c in v if ord(c) < 0x20 or ord(c) == 0x7F or c in "\u0085\u2028\u2029"), None)
        if bad is not None:
            raise ValueError(f"{v!r} holds a control character or line break ({bad!r}), which no field allows")
    elif isinstance(v, list | tuple):
        for item in v:
            _refuse_control(item)
    elif isinstance(v, dict):
        for key, item in v.items():
            _refuse_control(key)
            _refuse_control(item)
