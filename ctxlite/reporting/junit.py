"""A run's verdict as a JUnit XML file, the format CI servers read (one test case per example or ε row)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ctxlite.gates import Verdict
from ctxlite.outputs import write_atomic
from ctxlite.visible import visible


def write_junit(path: str | Path, verdict: Verdict) -> None:
    """Write ``verdict`` as JUnit XML (one ``testsuite``, one ``testcase`` per case) readable by CI
    servers; created owner-only (mode 0600) like the logs it summarises, atomically
    (:func:`ctxlite.outputs.write_atomic`). A failed case is a ``failure``, an inconclusive one an
    ``error`` (type ``ctxlite.inconclusive``: the budget could not be shown to hold, so CI must not
    count it as passed), a passed one has its basis in ``system-out``. Control and bidi characters
    of a case's name (an example id) are written as visible escapes: XML 1.0 cannot hold most of them."""
    failures, errors = str(len(verdict.failures)), str(len(verdict.inconclusive))
    suites = ET.Element("testsuites", tests=str(len(verdict.cases)), failures=failures, errors=errors)
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=verdict.suite,
        tests=str(len(verdict.cases)),
        failures=failures,
        errors=errors,
        skipped="0",
    )
    props = ET.SubElement(suite, "properties")
    outcome = "none" if verdict.outcome is None else verdict.outcome.value
    properties = {
        "verdict": outcome,
        "gate": verdict.gate or "none",
        "complete": str(verdict.complete).lower(),
        **verdict.properties,
    }
    for name, value in properties.items():
        ET.SubElement(props, "property", name=name, value=value)
    for case in verdict.cases:
        name, message = visible(case.name), visible(case.message)
        tc = ET.SubElement(suite, "testcase", name=name, classname=verdict.suite.replace(" ", "."))
        if case.failed:
            ET.SubElement(tc, "failure", type="ctxlite.gate", message=message).text = message
        elif case.inconclusive:
            ET.SubElement(tc, "error", type="ctxlite.inconclusive", message=message).text = message
        else:
            ET.SubElement(tc, "system-out").text = message
    write_atomic(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True), "JUnit file")


__all__ = ["write_junit"]
