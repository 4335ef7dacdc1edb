"""The public API (frenzy_core/__init__.py): every exported name resolves to the object its module defines."""

import importlib
import subprocess
import sys

import frenzy_core


def test_every_public_name_is_the_modules_own_object():
    for name, module in frenzy_core._EXPORTS.items():
        assert getattr(frenzy_core, name) is getattr(importlib.import_module(f"frenzy_core.{module}"), name)


def test_an_unknown_name_is_an_attribute_error():
    try:
        frenzy_core.no_such_thing  # noqa: B018
    except AttributeError as err:
        assert "no_such_thing" in str(err)
    else:
        raise AssertionError("no AttributeError")


def test_importing_a_submodule_does_not_load_the_whole_package():
    code = "import sys, frenzy_core.limits; print('frenzy_core.plans' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
