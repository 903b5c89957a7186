"""What a backend's section of the price files is built from (``Pricing``'s price section; the
files are read by ``launcher.plan.prices``). Light on purpose: a backend imports it when it
is imported, and that must not bring in the planner."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict

from launcher.spec import units


def _duration(v):
    return None if v is None else units.parse_duration(v)


# a duration with a unit ("30s", "2h"), in seconds
Duration = Annotated[Optional[int], BeforeValidator(_duration)]


class PriceModel(BaseModel):
    """Base of the backends' price-file models: frozen, unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)
