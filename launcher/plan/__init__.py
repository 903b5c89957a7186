"""The cost-aware planner: offers, their expected cost under preemption, ranking.

Public API (what ``launcher plan``, ``launcher launch`` and the SkyPilot backend call):

* ``gather_offers(spec, config, ...) -> Gathered(offers, notes)``: offers from the
  configured targets, each priced by its own backend (``Pricing``, handed an
  ``OfferContext``: price files, rates, catalog CSVs, queue waits, live spot prices).
* ``rank(spec, offers, params=None) -> PlanResult``: pure; ``PlanResult.candidates()``
  is the order to try offers in, ``PlanResult.best`` the first.
* ``plan(spec, config, params=None, **gather_kw)``: both.
* ``PlanRow.placement()``: a ranked row as a SkyPilot placement (infra, use_spot,
  instance_type, hourly_usd for the whole job), for the backend's candidate list.
* ``launcher.plan.chase``: observed preemptions -> posterior rates (spot chasing).
* ``launcher.plan.observed``: those observations kept in the state store; ``observe_job``
  is what ``launcher watch`` feeds them with, ``gather_offers(store=...)`` applies them.

Nothing here imports SkyPilot, paramiko or boto3; catalogs, price-file sections and live spot
prices are the backends' (``backends/<name>/``).
"""

from launcher.plan.chase import Observation, apply_observations
from launcher.plan.offers import Offer, resource_mismatch
from launcher.plan.ranking import PlanParams, PlanResult, PlanRow, params_for, rank
from launcher.plan.context import Gathered, OfferContext
from launcher.plan.sources import gather_offers, plan

__all__ = [
    "Gathered", "Observation", "Offer", "OfferContext", "PlanParams", "PlanResult", "PlanRow",
    "apply_observations", "gather_offers", "params_for", "plan", "rank", "resource_mismatch",
]
