"""The SDK's tests start the repository's wetask binary (debug build, or $WETASK_BIN) with the
test suite's own harness (tests/python/conftest.py: `Server`, `BINARY`), loaded by path under
another name, since this file is a conftest too."""
import importlib.util
import os

import pytest

_SUITE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "python", "conftest.py")
_spec = importlib.util.spec_from_file_location("wetask_suite_conftest", _SUITE)
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)

Server = _suite.Server
BINARY = _suite.BINARY


@pytest.fixture(scope="module", params=["1", "2"], ids=["shards1", "shards2"])
def server(request):
    srv = Server("--shards", request.param)
    yield srv
    srv.stop()
