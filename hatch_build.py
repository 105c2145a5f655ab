"""A wheel carries the built JupyterLab extension (labextension/dist, built by `make labextension`
with node and npm): building one without it is refused, never a wheel silently without it. An
editable install (`make setup`) may come first; the Makefile copies the extension in once built."""

from __future__ import annotations

from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        built = Path(self.root) / "labextension" / "dist" / "package.json"
        if self.target_name == "wheel" and version != "editable" and not built.exists():
            raise RuntimeError("The JupyterLab extension is not built: `make labextension` builds it "
                               "(with node and npm), then build the wheel again.")
