"""verl_ext's trainer integration (level 3): ``python -m verl_ext.main_ppo`` - verl's V1 and legacy trainers with
verl_ext's batch fields, actor worker and actor loss.

| module | contents |
| --- | --- |
| ``main`` | the Hydra entry point (``python -m verl_ext.main_ppo`` runs it) |
| ``dry_run`` | ``verl_ext.dry_run=true``: build, validate, summarise |
| ``validation`` | verl_ext's config-time checks (``ConfigError`` names the key), CPU mode's included |
| ``actor_config`` | ``FSDPActorConfig``: verl's plus the KL-clipping keys |
| ``actor_loss`` | the actor's ``ppo_loss``: verl's contract plus verl_ext's extra loss inputs and KL clipping |
| ``actor_worker`` | verl's ``ActorRolloutRefWorker`` with the graph-free current entropy for ERC |
| ``hooks`` | pure batch hooks: ``old_entropy`` (ERC) and ``cov_selected`` (batch-scope Clip-Cov / KL-Cov) |
| ``workers`` | maps the actor role to verl_ext's ``ActorRolloutRefWorker`` subclass |
| ``legacy`` | ``VerlExtRayPPOTrainer`` and ``VerlExtTaskRunner`` (``trainer.use_v1=false``) |
| ``v1`` | ``VerlExtV1Mixin`` and ``VerlExtTaskRunnerV1`` (``trainer.use_v1=true``; needs TransferQueue) |
| ``entropy_control`` | the entropy autopilot: its keys, the target schedule, the PI law on the selection ratio (pure) |
| ``token_lens`` | the token lens: its keys and the JSONL / wandb writer of the selected tokens |
| ``driver`` | both trainers' driver-side state (autopilot, lens) and its checkpoint file |
| ``checkpoints`` | where verl's trainers save and load a step's checkpoint (resume modes), asked by ``driver`` and ``run_log`` |
| ``run_log`` | verl's file log continued (not truncated) when a run resumes from a checkpoint |

Submodules are imported on demand: ``v1`` needs the ``TransferQueue`` package, ``legacy`` does not.
May import: ``verl_ext.config``, ``losses``, ``registration``, ``cpu`` (CPU mode's checks and switches) and
``analysis`` (the token lens's file name).
"""
