from __future__ import annotations

import pytest
from tests.plan.speed_helpers import seed_inputs_

from llamarig.plan.planner import PlanInputs


@pytest.fixture
def seed_inputs() -> PlanInputs:
    return seed_inputs_()
