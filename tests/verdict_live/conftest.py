from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.served import report_line


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    return report_line(request.config)
