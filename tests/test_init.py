"""The public API: every re-exported name resolves, and importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import pal_lightning


def test_every_public_name_resolves_to_its_module_object() -> None:
    for name in pal_lightning.__all__:
        value = getattr(pal_lightning, name)
        assert value is not None, name
    from pal_lightning.callbacks.gem import GEMCallback, project_gradient

    assert pal_lightning.GEMCallback is GEMCallback
    assert pal_lightning.project_gradient is project_gradient


def test_importing_the_package_does_not_import_torch() -> None:
    code = "import sys, pal_lightning; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
