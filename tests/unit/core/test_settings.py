"""One source of truth: the library's settings own every default, and ``ctxlite audit``
resolves exactly the audit that ``AuditSettings`` gives for the same choices."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from ctxlite.audit.settings import AuditSettings, EstimateSettings, MechanismKind, Task
from ctxlite.cli import audit as audit_cli
from ctxlite.cli import main

TASK_OF = {MechanismKind.RNM: (Task.CLASSIFY,), MechanismKind.ESA: (Task.GENERATE,)}
COMBINATIONS = [(m, t) for m in MechanismKind for t in TASK_OF.get(m, tuple(Task))]


class _Stop(Exception):
    pass


def cli_settings(monkeypatch, args) -> AuditSettings:
    """The AuditSettings the audit command builds for ``args`` (it stops before reading data)."""
    made = []

    class Recording(AuditSettings):
        def __post_init__(self):
            super().__post_init__()
            made.append(self)

    def stop(*a, **k):
        raise _Stop

    monkeypatch.setattr(audit_cli, "AuditSettings", Recording)
    monkeypatch.setattr(audit_cli, "load_records", stop)
    r = CliRunner().invoke(main, ["audit", "--data", "x.jsonl", *args])
    assert isinstance(r.exception, _Stop), r.output
    return made[-1]


@pytest.mark.parametrize("mechanism, task", COMBINATIONS, ids=lambda v: v.value)
def test_cli_defaults_equal_the_library_defaults(monkeypatch, mechanism, task):
    resolved = cli_settings(monkeypatch, ["--mechanism", mechanism.value, "--task", task.value])
    library = AuditSettings(mechanism=mechanism, task=task)
    assert resolved.params() == library.params()


def test_dp_defaults_are_the_ensemble_defaults():
    s = AuditSettings(mechanism="rnm")
    assert (s.shots, s.ensembles, s.epsilons, s.queries_per_trial) == (2, 10, (1.0, 2.0, 4.0, 8.0, math.inf), 1)
    plain = AuditSettings(mechanism="none")
    assert (plain.shots, plain.ensembles, plain.epsilons, plain.queries_per_trial) == (20, 1, (math.inf,), 64)


def test_explicit_values_override_the_defaults(monkeypatch):
    resolved = cli_settings(
        monkeypatch, ["--mechanism", "rnm", "--shots", "3", "--ensembles", "4", "--epsilon", "2,inf"]
    )
    assert resolved.params() == AuditSettings(mechanism="rnm", shots=3, ensembles=4, epsilons=(2.0, math.inf)).params()


def _options(command) -> dict:
    return {p.name: p for p in command.params}


def test_every_choice_list_is_an_enum_of_the_library():
    """The CLI's choice lists are the members of the library's enums, in the same order."""
    from ctxlite.audit.canaries import CanaryKind
    from ctxlite.audit.queries import QueryKind
    from ctxlite.audit.settings import Attack, BoundKind, DetectorKind
    from ctxlite.cli.audit import audit
    from ctxlite.gates import EpsilonUnit
    from ctxlite.runtime.backend import BackendKind
    from ctxlite.targets.spec import TargetKind

    kinds = {
        "task": Task,
        "mechanism": MechanismKind,
        "canary": CanaryKind,
        "query": QueryKind,
        "attack": Attack,
        "detector": DetectorKind,
        "bound": BoundKind,
        "backend": BackendKind,
        "epsilon_unit": EpsilonUnit,
        "target": TargetKind,
    }
    params = _options(audit)
    for name, kind in kinds.items():
        assert list(params[name].type.choices) == [m.value for m in kind], name
    choices = [n for n, p in params.items() if hasattr(p.type, "choices")]
    assert sorted(choices) == sorted(kinds)


def test_every_audit_option_default_is_the_settings_default():
    from dataclasses import MISSING, fields

    from ctxlite.cli.audit import audit

    params = _options(audit)
    checked = 0
    for f in [*fields(AuditSettings), *fields(EstimateSettings)]:
        if f.name not in params:
            continue
        want = f.default.value if hasattr(f.default, "value") else f.default
        assert f.default is not MISSING and params[f.name].default == want, f.name
        checked += 1
    assert checked >= 20


def test_score_defaults_are_the_library_defaults(monkeypatch):
    """``ctxlite score`` with no tuning flags builds InfluenceSettings() with SamplingSettings()."""
    from ctxlite.cli import score as score_mod
    from ctxlite.influence.scorer import InfluenceSettings

    made = []

    def stop(o):
        made.append(real(o))
        raise _Stop

    real = score_mod._settings
    monkeypatch.setattr(score_mod, "_settings", stop)
    r = CliRunner().invoke(main, ["score", "--context", "-", "-q", "Who?"], input="Alice")
    assert isinstance(r.exception, _Stop), r.output
    assert made[0] == InfluenceSettings()


def test_score_epsilon_sweep_reaches_the_settings(monkeypatch):
    """``--epsilon 4,1,4`` is the sweep ``InfluenceSettings(epsilons=(1.0, 4.0))``: sorted, no repeats (like
    the audit's); a bad ε is refused by the settings and by the CLI."""
    from ctxlite.cli import score as score_mod
    from ctxlite.errors import InvalidParameter
    from ctxlite.influence.scorer import InfluenceSettings

    made = []

    def stop(o, examples):
        made.append(score_mod._settings(o))
        raise _Stop

    monkeypatch.setattr(score_mod, "_check_combination", stop)
    r = CliRunner().invoke(main, ["score", "--context", "-", "-q", "Who?", "--epsilon", "4,1,4"], input="Alice")
    assert isinstance(r.exception, _Stop), r.output
    assert made[0].epsilons == (1.0, 4.0) and made[0] == InfluenceSettings(epsilons=(4.0, 1.0))
    assert InfluenceSettings(epsilons=2).epsilons == (2.0,) and InfluenceSettings().epsilons == ()
    for bad in ((0.0,), (1.0, -1.0), (math.inf,), (None,)):
        with pytest.raises(InvalidParameter):
            InfluenceSettings(epsilons=bad)
    for bad in ("0", "1,inf", "1,x"):
        r = CliRunner().invoke(main, ["score", "--context", "-", "-q", "Who?", "--epsilon", bad], input="Alice")
        assert r.exit_code == 2 and "--epsilon" in r.output, (bad, r.output)
