"""The fast tier's Hydra compositions parse each YAML text once: :func:`install`.

Every Hydra composition (a recipe's, through the entry point's config module) reads and parses the ~40 YAML files of
verl's and verl_ext's config groups again, with PyYAML's pure-Python loader: ~0.4 s of a ~0.6 s composition, some
hundreds of times per test run. :func:`install` makes OmegaConf's ``yaml.load`` (the one ``OmegaConf.load`` calls,
which Hydra's config sources use) keep what each distinct text parsed to and hand out a deep copy: the same text
gives the same objects, so a composition is what it was, and a changed file is a new text. A text that fails to parse
is parsed (and fails) every time, with its file's name in the error. Test code only: the product parses as Hydra does.
"""

from __future__ import annotations

import copy
import io
from typing import Any


class _Named(io.StringIO):
    def __init__(self, text: str, name: str):
        super().__init__(text)
        self.name = name


class _MemoYaml:
    """PyYAML's module with ``load`` keeping its results by text."""

    def __init__(self, real: Any):
        self._real = real
        self._parsed: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def load(self, stream: Any, Loader: Any) -> Any:  # noqa: N803 (PyYAML's name)
        text = stream if isinstance(stream, str) else stream.read()
        if text not in self._parsed:
            named = text if isinstance(stream, str) else _Named(text, getattr(stream, "name", "<file>"))
            self._parsed[text] = self._real.load(named, Loader=Loader)
        return copy.deepcopy(self._parsed[text])


def install() -> None:
    """Memoize OmegaConf's YAML parsing in this process (idempotent)."""
    import omegaconf.omegaconf as module

    if not isinstance(module.yaml, _MemoYaml):
        module.yaml = _MemoYaml(module.yaml)
