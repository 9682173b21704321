"""Ships ``gevent_sp_spark.pth`` at the top of site-packages, from a wheel and from an editable
install alike: the line that runs :mod:`pyspark_gsp._startup` at interpreter start (so a Spark
driver gets gsp_spark's hooks without importing it). Everything else is in pyproject.toml."""

from __future__ import annotations

import os
import shutil
from typing import Any

from setuptools import setup  # type: ignore[import-untyped]
from setuptools.command.build_py import build_py  # type: ignore[import-untyped]

PTH = "gevent_sp_spark.pth"
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src", PTH)


class BuildPyWithPth(build_py):  # type: ignore[misc]
    """A wheel: the .pth beside the packages."""

    def run(self) -> None:
        super().run()
        shutil.copyfile(SRC, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


cmdclass: dict[str, Any] = {"build_py": BuildPyWithPth}

try:  # an editable install's wheel holds only path entries unless told: add the .pth to it
    from setuptools.command.editable_wheel import (  # type: ignore[import-untyped]
        editable_wheel,
    )

    class EditableWheelWithPth(editable_wheel):  # type: ignore[misc]
        def _run_build_commands(self, dist_name: str, unpacked_wheel: str, *args: Any) -> Any:
            out = super()._run_build_commands(dist_name, unpacked_wheel, *args)
            shutil.copyfile(SRC, os.path.join(unpacked_wheel, PTH))
            return out

    cmdclass["editable_wheel"] = EditableWheelWithPth
except ImportError:  # setuptools < 64: no PEP 660 editable installs
    pass

setup(cmdclass=cmdclass)
