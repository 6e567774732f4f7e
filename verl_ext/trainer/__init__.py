"""verl_ext's trainer integration: verl's V1 and legacy trainers with verl_ext's batch fields and actor worker.

| module | contents |
| --- | --- |
| ``hooks`` | pure batch hooks: ``old_entropy`` (ERC) and ``cov_selected`` (batch-scope Clip-Cov / KL-Cov) |
| ``workers`` | maps the actor role to verl_ext's ``ActorRolloutRefWorker`` subclass |
| ``legacy`` | ``VerlExtRayPPOTrainer`` and ``VerlExtTaskRunner`` (``trainer.use_v1=false``) |
| ``v1`` | ``VerlExtV1Mixin`` and ``VerlExtTaskRunnerV1`` (``trainer.use_v1=true``; needs TransferQueue) |
| ``validation`` | verl_ext's config-time checks (``ConfigError`` names the key) |

Submodules are imported on demand: ``v1`` needs the ``TransferQueue`` package, ``legacy`` does not.
"""
