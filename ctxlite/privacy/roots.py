"""Root finding for the privacy mathematics: Brent's method (scipy), loaded on first use.

scipy.optimize costs ~0.3 s of every command's start (it loads linprog, linalg and sparse), and
most commands never solve for a root: the bounds that do (GDP's ε(δ), the one-run bound, the
Gaussian calibration) import this module and pay that once, when they first call it.
"""

from __future__ import annotations


def brentq(f, a: float, b: float, *, xtol: float, rtol: float) -> float:
    """The root of ``f`` in [a, b] (f(a) and f(b) of opposite signs): scipy.optimize.brentq."""
    from scipy import optimize

    return float(optimize.brentq(f, a, b, xtol=xtol, rtol=rtol))
