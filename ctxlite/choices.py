"""Enums that parse from their CLI spelling (shared by canaries, queries, ...)."""

from __future__ import annotations

import enum
import re

from ctxlite.errors import InvalidParameter


class Choice(enum.Enum):
    """An enum whose members parse from their value (the CLI spelling), their
    name, or any extra spelling a subclass lists in ``spellings``."""

    @property
    def spellings(self) -> tuple:
        return (self.value, self.name)

    @classmethod
    def parse(cls, value):
        if isinstance(value, cls):
            return value
        for member in cls:
            if value in member.spellings:
                return member
        label = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()
        raise InvalidParameter(f"unknown {label} {value!r}: use one of {', '.join(m.value for m in cls)}")
