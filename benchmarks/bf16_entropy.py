"""What bf16 compute does to the entropy and to ERC's entropy ratio: the same batch, the same two weight sets, through
verl's FSDP engine in fp32 and in bf16.

On SmolLM2-135M-Instruct (the format-warmed model ``SCALE=cpu MODEL=smollm2`` trains):

1. ``--prompts`` GSM8K-format prompts x ``--n`` responses of up to 64 tokens sampled from the model in fp32
   (temperature 1);
2. ``θ_old`` is the model, ``θ_new`` the model after one AdamW step at the recipe's learning rate (1e-5) on a GRPO
   loss with a random reward per response, normalised within its prompt's group;
3. per-token entropies of the response tokens under ``θ_old`` and ``θ_new``, through verl's FSDP2 engine
   (:class:`benchmarks.cpu_actor.CpuActor`, verl's old-log-prob pass), three ways:

   * ``fp32``: fp32 compute (the reference);
   * ``bf16``: bf16 compute as CPU mode runs it (FSDP2 mixed precision, autocast), verl's entropy of the bf16
     logits in bf16 (verl's default, ``entropy_from_logits_with_chunking=false``, as on a GPU);
   * ``bf16 + fp32 entropy``: bf16 compute, the entropy computed in fp32 from the bf16 logits (verl's
     ``entropy_from_logits_with_chunking=true``);

4. ERC's ratio ``ρ = H_new / H_old`` per token and its band (the ``grpo_erc`` group's 0.95 / 1.05): the share of
   tokens whose in-band decision differs from fp32's ("flips"), beside fp32's own share outside the band;
5. the on-policy ratio: ``θ_old``'s entropies again with 2 rows per forward pass instead of 8 (the old-log-prob pass
   and the update pack micro-batches differently) - the share of tokens outside the band with no update at all.

    python -m benchmarks.bf16_entropy --json benchmarks/results/results_bf16_entropy.json
    python -m benchmarks.bf16_entropy --summarise benchmarks/results/results_bf16_entropy.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REPACKED = 2
"""Rows per forward pass of the repacked on-policy pass (the main passes pack 8; both divide the 64 rows): the same weights and tokens in other
shapes, as verl's old-log-prob pass and update pack them differently."""
VARIANTS = {"fp32": ("fp32", False), "bf16": ("bf16", False), "bf16 + fp32 entropy": ("bf16", True)}
"""Variant -> (CpuActor precision, verl's ``entropy_from_logits_with_chunking``)."""


def band() -> tuple[float, float]:
    """ERC's band from its config group (``configs/policy_loss/grpo_erc.yaml``)."""
    import yaml

    group = yaml.safe_load((REPO / "configs" / "policy_loss" / "grpo_erc.yaml").read_text())
    return float(group["entropy_mask_low"]), float(group["entropy_mask_high"])


def sample(model: Any, tok: Any, data: Path, prompts: int, n: int, seed: int) -> tuple[list, list]:
    """Prompt and response token ids: ``prompts`` problems x ``n`` responses sampled in fp32."""
    import pandas as pd
    import torch

    torch.manual_seed(seed)
    rows = pd.read_parquet(data).iloc[:prompts]
    prompt_ids, response_ids = [], []
    for messages in rows["prompt"]:
        ids = tok.apply_chat_template(list(messages), add_generation_prompt=True, return_tensors="pt")
        ids = ids if torch.is_tensor(ids) else ids["input_ids"]
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_p=1.0,
                             top_k=0, max_new_tokens=64, num_return_sequences=n, pad_token_id=tok.pad_token_id)  # fmt: skip
        for seq in out:
            response = seq[ids.shape[1]:].tolist()
            while len(response) > 1 and response[-1] == tok.pad_token_id:
                response.pop()
            prompt_ids.append(ids[0].tolist())
            response_ids.append(response)
    return prompt_ids, response_ids


def one_step(model: Any, prompt_ids: list, response_ids: list, n: int, lr: float, seed: int) -> None:
    """One AdamW step of a GRPO loss (random reward per response, normalised per group) on ``model``, in place."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    reward = torch.randint(0, 2, (len(response_ids),), generator=gen).float().view(-1, n)
    adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)).view(-1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    total = sum(len(r) for r in response_ids)
    for p, r, a in zip(prompt_ids, response_ids, adv):
        x = torch.tensor([p + r])
        logits = model(x).logits[0, len(p) - 1 : -1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
        (-(a * lp).sum() / total).backward()
    opt.step()


def entropies(path: str, batch: Any, precision: str, fp32_entropy: bool, micro: int = 8) -> Any:
    """Per-token entropies and log-probs of the batch's responses through verl's FSDP2 engine, ``micro`` rows packed
    per forward pass."""
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig

    from verl_ext.config import PolicyLossConfig
    from benchmarks.cpu_actor import CpuActor
    from verl_ext.trainer.actor_config import FSDPActorConfig

    config = FSDPActorConfig(
        strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=micro, ppo_micro_batch_size_per_gpu=micro,
        optim=FSDPOptimizerConfig(lr=1e-5), policy_loss=PolicyLossConfig(loss_mode="vanilla"),
        fsdp_config=FSDPEngineConfig(strategy="fsdp2", entropy_from_logits_with_chunking=fp32_entropy),
    )  # fmt: skip
    actor = CpuActor(path, config, precision=precision)
    out = actor.compute_log_prob(batch, calculate_entropy=True)
    return out["entropy"], out["log_probs"]


def measure(model_dir: Path, data: Path, prompts: int, n: int, seed: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.cpu_actor import make_batch

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    with torch.no_grad():
        prompt_ids, response_ids = sample(model, tok, data, prompts, n, seed)
    batch = make_batch(prompt_ids, response_ids, tok.pad_token_id)
    mask = batch["response_mask"].bool()
    low, high = band()
    results: dict[str, Any] = {"tokens": int(mask.sum()), "band": [low, high], "variants": {}}
    with tempfile.TemporaryDirectory() as tmp:
        new_dir = Path(tmp) / "theta_new"
        one_step(model, prompt_ids, response_ids, n, lr=1e-5, seed=seed)
        model.save_pretrained(new_dir)
        tok.save_pretrained(new_dir)
        raw: dict[str, Any] = {}
        for name, (precision, fp32_entropy) in VARIANTS.items():
            h_old, lp_old = entropies(str(model_dir), batch, precision, fp32_entropy)
            h_new, _ = entropies(str(new_dir), batch, precision, fp32_entropy)
            h_repacked, _ = entropies(str(model_dir), batch, precision, fp32_entropy, micro=REPACKED)
            raw[name] = (h_old[mask].double(), h_new[mask].double(), lp_old[mask].double(), h_repacked[mask].double())
    ref_old, ref_new, ref_lp, _ = raw["fp32"]
    ref_rho = (ref_new + 1e-8) / (ref_old + 1e-8)
    ref_in = (ref_rho > low) & (ref_rho < high)
    for name, (h_old, h_new, lp, h_repacked) in raw.items():
        rho = (h_new + 1e-8) / (h_old + 1e-8)
        inside = (rho > low) & (rho < high)
        on_policy = (h_repacked + 1e-8) / (h_old + 1e-8)
        results["variants"][name] = {
            "mean_entropy": float(h_old.mean()),
            "mean_abs_entropy_error": float((h_old - ref_old).abs().mean()),
            "median_rel_entropy_error": float(((h_old - ref_old).abs() / ref_old.clamp(min=1e-6)).median()),
            "mean_abs_log_prob_error": float((lp - ref_lp).abs().mean()),
            "outside_band": float((~inside).double().mean()),
            "flips": float((inside != ref_in).double().mean()),
            "on_policy_outside_band": float(((on_policy <= low) | (on_policy >= high)).double().mean()),
        }
    return results


def table(result: dict[str, Any]) -> str:
    low, high = result["band"]
    lines = [f"| compute ({result['tokens']} response tokens) | mean H (θ_old) | mean abs H error | median rel H error | "
             f"mean abs log-prob error | ρ outside ({low}, {high}) | flips against fp32 | on-policy ρ outside, "
             f"repacked |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, v in result["variants"].items():
        lines.append(f"| {name} | {v['mean_entropy']:.3f} | {v['mean_abs_entropy_error']:.4f} | "
                     f"{v['median_rel_entropy_error']:.1%} | {v['mean_abs_log_prob_error']:.4f} | "
                     f"{v['outside_band']:.1%} | {v['flips']:.1%} | {v['on_policy_outside_band']:.1%} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("recipe_cpu/smollm2/model"), help="the warmed SmolLM2")
    parser.add_argument("--data", type=Path, default=Path("recipe_cpu/smollm2/data/gsm8k-train.parquet"))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--summarise", type=Path, metavar="JSON", help="print the table of a results file and exit")
    args = parser.parse_args(argv)
    if args.summarise:
        print(table(json.loads(args.summarise.read_text())))
        return 0
    from verl_ext.cpu.machine import machine_info

    result = {"machine": machine_info(), "model": str(args.model), "prompts": args.prompts, "n": args.n,
              "seed": args.seed, **measure(args.model, args.data, args.prompts, args.n, args.seed)}  # fmt: skip
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
