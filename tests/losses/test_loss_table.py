"""docs/losses.md's table of the losses is made from their declarations (``verl_ext.losses.SPECS``), the config
class's defaults and the YAML groups (``configs/policy_loss/<loss>.yaml``, ``configs/loss_actor/<loss>.yaml``).

Print it with ``python tests/losses/test_loss_table.py``.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import yaml

from _docs_block import shown_block

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "losses.md"
CONFIGS = ROOT / "configs"
START, END = "<!-- loss-table:start -->", "<!-- loss-table:end -->"


def _value(value: object) -> str:
    return f"`{value}`" if isinstance(value, str) else str(value)


def _needs(spec, defaults: dict) -> str:
    """What the loss needs from the trainer at its class defaults (and the key that moves it into the call)."""
    needs = spec.needs(defaults)
    said = [text for flag, text in ((needs.old_entropy, "old entropy"), (needs.current_entropy, "update entropy"),
                                    (needs.batch_field, f"batch field `{needs.batch_field}`"),
                                    (needs.step_pass, "a no-grad pass per optimiser step")) if flag]  # fmt: skip
    text = ", ".join(said) or "none"
    return f"{text} (`{needs.micro_key}=micro`: in the call)" if needs.micro_key else text


def table() -> str:
    from verl_ext.config import PolicyLossConfig
    from verl_ext.losses import SPECS

    defaults = {f.name: f.default for f in fields(PolicyLossConfig)}
    rows = ["| loss | method | keys (`actor_rollout_ref.actor.policy_loss.*`): class default → group file | "
            "actor settings of its group | needs from the trainer | `clip_high` actuator |",
            "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, spec in SPECS.items():
        group = yaml.safe_load((CONFIGS / "policy_loss" / f"{name}.yaml").read_text())
        keys = []
        for key in spec.keys:
            default, chosen = defaults[key], group.get(key, defaults[key])
            keys.append(f"`{key}` {_value(default)}" + ("" if chosen == default else f" → {_value(chosen)}"))
        actor_file = CONFIGS / "loss_actor" / f"{name}.yaml"
        actor = yaml.safe_load(actor_file.read_text()) if actor_file.is_file() else {}
        paired = ", ".join(f"`{k}={v}`" for k, v in actor.items()) or "-"
        clip = "acts" if spec.clip_high is not None else "refused"
        rows.append(f"| `{name}` | {spec.paper} | {', '.join(keys)} | {paired} | {_needs(spec, defaults)} | {clip} |")
    return "\n".join(rows)


def test_the_docs_table_is_the_declarations():
    assert shown_block(DOCS, START, END) == table(), f"{DOCS}'s loss table differs from the declarations; print it with `python {__file__}`"


def test_every_declared_loss_has_its_yaml_group_and_every_group_a_loss():
    from verl_ext.losses import SPECS

    groups = {p.stem for p in (CONFIGS / "policy_loss").glob("*.yaml")} - {"base", "vanilla"}
    assert groups == set(SPECS)


if __name__ == "__main__":
    print(table())
