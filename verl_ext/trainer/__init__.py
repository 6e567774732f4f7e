"""verl plumbing (level 4): verl's V1 and legacy trainers, actor worker and actor loss with verl_ext's batch fields.

| module | contents |
| --- | --- |
| ``v1`` | ``VerlExtV1Mixin`` and ``VerlExtTaskRunnerV1`` (``trainer.use_v1=true``; needs TransferQueue) |
| ``legacy`` | ``VerlExtRayPPOTrainer`` and ``VerlExtTaskRunner`` (``trainer.use_v1=false``) |
| ``hooks`` | pure batch hooks: ``old_entropy`` (ERC) and ``cov_selected`` (batch-scope Clip-Cov / KL-Cov) |
| ``advantage_store`` | V1: verl_ext's fields fetched and stored with verl's own advantage step (no round trip of their own) |
| ``workers`` | maps the actor role to verl_ext's ``ActorRolloutRefWorker`` subclass |
| ``actor_worker`` | verl's ``ActorRolloutRefWorker`` with the graph-free current entropy for ERC |
| ``bapo_step`` | BAPO's clip bounds once per optimiser step: a no-grad pass over the mini-batch, all-reduced |
| ``actor_loss`` | the actor's ``ppo_loss``: verl's contract plus verl_ext's extra loss inputs and KL clipping |
| ``actor_config`` | ``FSDPActorConfig``: verl's plus the KL-clipping keys |

The entry point (``python -m verl_ext.main_ppo``) picks the trainer; submodules are imported on demand (``v1`` needs
the ``TransferQueue`` package, ``legacy`` does not). May import: ``verl_ext.config``, ``contract``, ``versions``,
``losses``, ``control``, ``registration``, ``cpu``, ``analysis`` (pure metric arithmetic) and ``driver``.
"""
