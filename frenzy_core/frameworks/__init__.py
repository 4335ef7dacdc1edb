"""The training stacks, one module each, in one registry: `FRAMEWORKS[name]` is what `TrainingSpec.framework` names.

Adding a stack is one module building a `Framework` and one line below. Code outside this package asks the value
(`get(training.framework).supports_cp`), never compares the name.

>>> list(FRAMEWORKS)
['pytorch', 'hf', 'megatron', 'fsdp2', 'deepspeed', 'torchtune', 'litgpt', 'unknown']
>>> KNOWN  # the stacks with a recipe of their own; unknown is the band over them
('pytorch', 'hf', 'megatron', 'fsdp2', 'deepspeed', 'torchtune', 'litgpt')
>>> switch_owner("compile").name
'fsdp2'
"""

from __future__ import annotations

from frenzy_core.errors import SpecError
from frenzy_core.frameworks import deepspeed, fsdp2, hf, litgpt, megatron, pytorch, torchtune, unknown
from frenzy_core.frameworks.base import Framework, Recipe

FRAMEWORKS: dict[str, Framework] = {
    fw.name: fw
    for fw in (pytorch.FRAMEWORK, hf.FRAMEWORK, megatron.FRAMEWORK, fsdp2.FRAMEWORK, deepspeed.FRAMEWORK,
               torchtune.FRAMEWORK, litgpt.FRAMEWORK, unknown.FRAMEWORK)
}
KNOWN: tuple[str, ...] = tuple(name for name, fw in FRAMEWORKS.items() if not fw.is_band)
# TrainingSpec fields that belong to a stack, and which: refused under the others, accepted under unknown; a switch
# two stacks share (compile: fsdp2 and torchtune) is owned by the first, whose refusal names both
SWITCH_OWNERS: dict[str, str] = {}
for _name in KNOWN:
    for _field in FRAMEWORKS[_name].switches:
        SWITCH_OWNERS.setdefault(_field, _name)


def get(name: str) -> Framework:
    """The registered stack called `name`; a SpecError naming `framework` otherwise."""
    try:
        return FRAMEWORKS[name]
    except (KeyError, TypeError):
        raise SpecError("framework", f"unknown framework {name!r}; choose one of: {', '.join(FRAMEWORKS)}") from None


def switch_owner(field: str) -> Framework:
    """The stack whose own switch the TrainingSpec field `field` is (KeyError if it belongs to none)."""
    return FRAMEWORKS[SWITCH_OWNERS[field]]


__all__ = ["FRAMEWORKS", "KNOWN", "SWITCH_OWNERS", "Framework", "Recipe", "get", "switch_owner"]
