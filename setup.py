"""Records the Git commit a wheel is built from in the package (`pipeline.buildinfo`); everything
else about the build is in pyproject.toml."""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithCommit(build_py):
    """`build_py` that also writes `pipeline/BUILD_COMMIT` when built from a Git checkout."""

    def run(self) -> None:
        super().run()
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
        commit = done.stdout.strip() if done.returncode == 0 else ""
        if commit and not self.editable_mode:
            Path(self.build_lib, "pipeline", "BUILD_COMMIT").write_text(commit + "\n", encoding="ascii")


setup(cmdclass={"build_py": BuildPyWithCommit})
