"""A real engine behind fewer capabilities: for the tests of what a backend without them gets."""

from __future__ import annotations

from ctxlite.runtime.backend import Backend, TeacherForcing, sequential_logprobs


def _members(protocol) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(getattr(protocol, "__annotations__", {}))


class Restricted:
    """The real engine behind a backend that has only tokenization, teacher forcing and the given
    capabilities: an object with exactly their members (each call recorded), so a path that needs
    another one finds it missing, and ``isinstance`` says which capabilities it has."""

    def __new__(cls, engine, capabilities=()):
        names = set().union(*(_members(p) for p in (Backend, TeacherForcing, *capabilities))) - {"describe"}

        def member(name):
            def get(self):
                self.calls.append(name)
                return getattr(self._engine, name)

            return property(get)

        body = {name: member(name) for name in names if not hasattr(cls, name)}
        restricted = type(cls.__name__, (cls,), body)
        return object.__new__(restricted)

    def __init__(self, engine, capabilities=()):
        self._engine, self.calls = engine, []

    def describe(self):
        return {"backend": "restricted test"}

    def logprobs_many(self, requests, temperature=1.0, on_done=None):
        """One after the other through ``logprobs`` (each recorded)."""
        return sequential_logprobs(self, requests, temperature, on_done)
