"""Scheduling policies: one signature (`decide(view) -> decisions`), one registry. Add a policy: one file, one line.

A policy is one module, `policies/<name>.py`: its class (registered below under its `name`), its `Options` (a frozen
dataclass of its own knobs with their defaults), its `colour` and `note` (what the pages show), its event-engine
`decide` and its round-engine `round_allocator` (or None, with `no_round_engine` saying why). The lookups below read
those, so pages and the simulator never keep a table of their own:

>>> options_for("sia").round_s, colour("fcfs"), engines("fcfs")
(60.0, '#ef6c00', ('event',))
"""

from __future__ import annotations

from typing import Any

from frenzy_core.errors import SpecError
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
# the policies the round engine runs (`rounds.simulate_rounds`, --job-model sia-apps); the others say why not
ROUND_POLICIES: tuple[str, ...] = tuple(name for name, cls in REGISTRY.items() if cls.round_allocator is not None)


def policy_class(name: str) -> type[Policy]:
    """The registered class, or SpecError("policy") listing the registered names."""
    cls = REGISTRY.get(name)
    if cls is None:
        raise SpecError("policy", f"unknown policy {name!r}; choose one of: {', '.join(REGISTRY)}")
    return cls


def options_for(name: str) -> Any:
    """The policy's knobs with nothing overridden (its `Options`' defaults), e.g. options_for("frenzy").objective
    == "gpu-hours"; `simulate.SimOptions.options_for` adds a run's overrides."""
    return policy_class(name).default_options()


def colour(name: str) -> str | None:
    """The policy's fixed chart colour; None for a name not registered or a class that brings none (`color`, the
    older spelling, is read too)."""
    cls = REGISTRY.get(name)
    return None if cls is None else getattr(cls, "colour", None) or getattr(cls, "color", None)


def note(name: str) -> str:
    """One plain-language paragraph on what the policy does and knows (shown on the pages)."""
    return policy_class(name).note


def engines(name: str) -> tuple[str, ...]:
    """The engines the policy runs on: "event" (the LLM job model) and/or "round" (--job-model sia-apps)."""
    cls = policy_class(name)
    return tuple(e for e, on in (("event", cls.event_engine), ("round", cls.round_allocator is not None)) if on)


def no_round_engine(name: str) -> str:
    """Why the policy has no round-engine version ("" when it has one)."""
    cls = policy_class(name)
    return "" if cls.round_allocator is not None else cls.no_round_engine


__all__ = ["EVENT_POLICIES", "REGISTRY", "ROUND_POLICIES", "Decision", "Policy", "PolicyContext", "Preempt", "Reject",
           "SchedulerView", "Start", "colour", "engines", "no_round_engine", "note", "options_for", "policy_class"]
