"""One error type for bad input, so every boundary (CLI, pages, loaders) can show a one-line message."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError


class SpecError(ValueError):
    """Bad user input. `field` names what is wrong; the message says how to fix it.

    >>> str(SpecError("hidden_size", "must be a positive integer, got -1"))
    'hidden_size: must be a positive integer, got -1'
    """

    def __init__(self, field: str, message: str, source: str | None = None):
        self.field = field
        self.source = source
        self.reason = message
        prefix = f"{source}: " if source else ""
        super().__init__(f"{prefix}{field}: {message}")


def from_validation_error(
    err: ValidationError, source: str | None = None, fields: Iterable[str] = ()
) -> SpecError:
    """Turn pydantic's multi-line error into one SpecError naming the first bad field.

    Errors raised by a whole-model validator carry no location; their messages start with the field name (our
    convention), so when that first word is one of `fields` it becomes the field.
    """
    first = err.errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ()))
    msg = first.get("msg", "invalid value")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if not field:
        lead = re.match(r"([A-Za-z_][A-Za-z0-9_]*)", msg)
        field = lead.group(1) if lead and lead.group(1) in set(fields) else "(input)"
    if "input" in first and not msg.endswith(")") and first.get("type") != "value_error":
        from frenzy_core.limits import short_repr

        msg = f"{msg} (got {short_repr(first['input'])})"
    extra = len(err.errors()) - 1
    if extra:
        msg += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return SpecError(field, msg, source)


def read_text_file(path: str | Path, field: str, expected: str) -> str:
    """Read a user's text file; any failure becomes a SpecError naming `field` and what was `expected`.

    >>> read_text_file("/nonexistent.yaml", "cluster", "a cluster YAML file")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: cluster: file not found: /nonexistent.yaml
    """
    p = Path(path)
    try:
        return p.read_text()
    except FileNotFoundError:
        raise SpecError(field, f"file not found: {p}") from None
    except IsADirectoryError:
        raise SpecError(field, f"{p} is a folder; give the path of {expected}") from None
    except UnicodeDecodeError:
        raise SpecError(field, f"{p.name} is not a text file; give {expected}") from None
    except OSError as err:
        raise SpecError(field, f"cannot read {p}: {err.strerror}") from None
