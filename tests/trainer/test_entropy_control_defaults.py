"""One source per value for ``verl_ext.entropy_control``: the keys and defaults of :class:`EntropyControlConfig` are
those of the composed top config (``configs/verl_ext_base.yaml``, which ``verl_ext_trainer.yaml`` composes), in both
directions, so that a default changed in one place and not the other fails here."""

from __future__ import annotations

from dataclasses import fields

import pytest
from omegaconf import OmegaConf

from verl_ext.control.entropy_control import EntropyControlConfig

DEFAULTS = {f.name: f.default for f in fields(EntropyControlConfig)}


def drift(section: dict) -> list[str]:
    """Every difference between the YAML section and the dataclass: a field missing from the YAML, a default that
    differs (value or type), a YAML key that is no field."""
    problems = [f"{k}: not in the YAML" for k in sorted(set(DEFAULTS) - set(section))]
    problems += [f"{k}: dataclass {DEFAULTS[k]!r}, YAML {section[k]!r}" for k in sorted(set(DEFAULTS) & set(section))
                 if section[k] != DEFAULTS[k] or type(section[k]) is not type(DEFAULTS[k])]  # fmt: skip
    problems += [f"{k}: not a field of EntropyControlConfig" for k in sorted(set(section) - set(DEFAULTS))]
    return problems


@pytest.fixture()
def section(compose):
    return OmegaConf.to_container(compose(base=()).verl_ext.entropy_control, resolve=True)


def test_the_yaml_section_and_the_dataclass_agree_key_by_key_in_both_directions(section):
    assert set(section) == set(DEFAULTS) and not drift(section), drift(section)


def test_the_check_finds_each_kind_of_drift(section):
    drifted = {k: v for k, v in section.items() if k != "auto_lag"}
    drifted.update(kp=9.0, ratio_max=1, typo_key=True)
    assert drift(drifted) == ["auto_lag: not in the YAML", "kp: dataclass 10.0, YAML 9.0",
                              "ratio_max: dataclass 0.2, YAML 1", "typo_key: not a field of EntropyControlConfig"]  # fmt: skip
