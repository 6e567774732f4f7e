"""One source per value for the policy-loss keys verl_ext adds: the defaults of :class:`verl_ext.config.PolicyLossConfig`
(the fields it adds to verl's class) are those of ``configs/policy_loss/base.yaml``, and every key of that file is
one of them, so that a default changed in one place and not the other fails here. The papers' values per loss live
in the loss's own group file (``configs/policy_loss/<loss>.yaml``)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import yaml
from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig

from verl_ext.config import PolicyLossConfig

BASE = Path(__file__).resolve().parents[2] / "configs" / "policy_loss" / "base.yaml"
OWN = {f.name: f.default for f in fields(PolicyLossConfig)} .items() - {f.name: f.default for f in fields(VerlPolicyLossConfig)}.items()


def drift(section: dict, own: dict) -> list[str]:
    problems = [f"{k}: not in base.yaml" for k in sorted(set(own) - set(section))]
    problems += [f"{k}: dataclass {own[k]!r}, base.yaml {section[k]!r}" for k in sorted(set(own) & set(section))
                 if section[k] != own[k] or type(section[k]) is not type(own[k])]  # fmt: skip
    problems += [f"{k}: not a field verl_ext adds" for k in sorted(set(section) - set(own))]
    return problems


def test_base_yaml_and_the_dataclass_agree_key_by_key_in_both_directions():
    section = yaml.safe_load(BASE.read_text())
    section.pop("_target_")
    own = dict(OWN)
    assert own, "verl_ext adds no field?"
    assert not drift(section, own), drift(section, own)


def test_the_check_finds_each_kind_of_drift():
    own = dict(OWN)
    section = {**own, "typo_key": 1}
    section.pop("cov_seed")
    section["entropy_mask_low"] = 0.5
    assert drift(section, own) == ["cov_seed: not in base.yaml", "entropy_mask_low: dataclass 0.8, base.yaml 0.5",
                                   "typo_key: not a field verl_ext adds"]  # fmt: skip
