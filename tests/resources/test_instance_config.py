"""The shipped Dagster instance files turn off the UI's first-visit dialog and telemetry.

On a fresh instance the Dagster UI covers its first page with a "Join the Dagster community" dialog
(``nux``) unless the instance says ``nux: {enabled: false}``. Both shipped files say so, and the
per-profile instance directory the Makefile fills (``.dagster_home/<profile>/dagster.yaml``, copied
again whenever the shipped file is newer) is the file Dagster reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("shipped", ["dagster.yaml", "dagster.postgres.yaml"])
def test_each_shipped_instance_file_disables_nux_and_telemetry(shipped, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / shipped, home / "dagster.yaml")
    ref = InstanceRef.from_dir(str(home))  # validates the file against Dagster's instance schema
    assert ref.settings["nux"] == {"enabled": False}
    assert ref.settings["telemetry"] == {"enabled": False}


def test_the_makefile_s_profile_instance_is_loaded_with_nux_disabled(tmp_path):
    """``make`` refreshes a stale per-profile copy; the instance Dagster opens there has nux off."""
    home = tmp_path / "profile_home"
    home.mkdir()
    stale = home / "dagster.yaml"
    stale.write_text("telemetry:\n  enabled: false\n")  # a copy made before nux was turned off
    os.utime(stale, (0, 0))
    subprocess.run(
        ["make", "-s", f"DAGSTER_HOME={home}", str(stale)], cwd=REPO, check=True, timeout=60
    )
    assert stale.read_text() == (REPO / "dagster.yaml").read_text()
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        assert instance.nux_enabled is False
        assert instance.telemetry_enabled is False
