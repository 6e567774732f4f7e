"""benchmarks.offline_bench stands in only for packages that are missing, never for an installed one."""

import subprocess
import sys

CODE = """
import benchmarks.offline_bench as ob
ob.install(force={force})
import ray
print(ray.__version__)
"""


def _ray_version(force: bool) -> str:
    out = subprocess.run([sys.executable, "-c", CODE.format(force=force)], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_an_installed_package_is_imported_for_real():
    assert _ray_version(force=False) != "0.0.0-stub"


def test_a_missing_package_gets_the_stand_in():
    assert _ray_version(force=True) == "0.0.0-stub"
