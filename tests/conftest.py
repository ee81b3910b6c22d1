"""Settings shared by every test folder: hypothesis profiles.

``HYPOTHESIS_PROFILE=mutation`` (set by tools/mutation/run.sh) skips shrinking: under mutation
testing a failing example only has to fail, and shrinking it can take longer than mutmut's timeout.
No example database is written (the property tests are derandomised: the same examples every run).
"""

from __future__ import annotations

import os

from hypothesis import Phase, settings

settings.register_profile("pal", database=None, derandomize=True)
settings.register_profile(
    "mutation", database=None, derandomize=True, phases=(Phase.explicit, Phase.generate)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pal"))
