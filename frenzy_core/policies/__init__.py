"""Scheduling policies: one signature (`decide(view) -> decisions`), one registry. Add a policy: one file, one line."""

from __future__ import annotations

from frenzy_core.policies.base import Decision, Policy, PolicyContext, Preempt, Reject, SchedulerView, Start
from frenzy_core.policies.fcfs import FcfsPolicy
from frenzy_core.policies.frenzy import FrenzyPolicy
from frenzy_core.policies.frenzy_eft import FrenzyEftPolicy
from frenzy_core.policies.frenzy_elastic import FrenzyElasticPolicy, FrenzyElasticSrptPolicy
from frenzy_core.policies.frenzy_las import FrenzyLasPolicy
from frenzy_core.policies.frenzy_share import FrenzySharePolicy
from frenzy_core.policies.frenzy_srpt import FrenzySrptPolicy
from frenzy_core.policies.gavel import GavelPolicy
from frenzy_core.policies.sia import SiaPolicy
from frenzy_core.policies.sia_real import SiaRealPolicy

REGISTRY: dict[str, type[Policy]] = {
    "frenzy": FrenzyPolicy,
    "frenzy-share": FrenzySharePolicy,
    "frenzy-eft": FrenzyEftPolicy,
    "frenzy-srpt": FrenzySrptPolicy,
    "frenzy-las": FrenzyLasPolicy,
    "frenzy-elastic": FrenzyElasticPolicy,
    "frenzy-elastic-srpt": FrenzyElasticSrptPolicy,
    "fcfs": FcfsPolicy,
    "sia": SiaPolicy,
    "sia-real": SiaRealPolicy,
    "gavel": GavelPolicy,
}

# the policies the event engine runs (the LLM job model: `simulate`, the pages, what-ifs and scenarios); a policy with
# `event_engine = False` would run on the round engine only (`frenzy simulate --job-model sia-apps`); none does today
EVENT_POLICIES: tuple[str, ...] = tuple(name for name, cls in REGISTRY.items() if cls.event_engine)

__all__ = ["EVENT_POLICIES", "REGISTRY", "Decision", "Policy", "PolicyContext", "Preempt", "Reject", "SchedulerView", "Start"]
