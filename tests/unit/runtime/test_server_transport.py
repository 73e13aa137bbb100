"""The HTTP side of a server backend (ctxlite/runtime/server_transport.py), without a model."""

from __future__ import annotations

import math

import pytest

from ctxlite.errors import InvalidParameter
from ctxlite.runtime.server_transport import MAX_REQUEST_TIMEOUT, ServerConfig


@pytest.mark.parametrize("timeout", [math.inf, 1e308, 1e100, math.nan, MAX_REQUEST_TIMEOUT * 2])
def test_a_timeout_that_no_socket_takes_is_refused_by_the_config(timeout):
    """The Python API's path to the same OverflowError as the CLI's: refused in one line."""
    with pytest.raises(InvalidParameter, match="timeout"):
        ServerConfig("http://127.0.0.1:9/v1", "m", timeout=timeout)
    assert ServerConfig("http://127.0.0.1:9/v1", "m", timeout=MAX_REQUEST_TIMEOUT).timeout == MAX_REQUEST_TIMEOUT
