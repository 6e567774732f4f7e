"""What verl_ext adds to the trainer's driver (level 3): state kept across steps and checkpoints, written beside
verl's own outputs. Both trainers (:mod:`verl_ext.trainer`) mix it in.

| module | contents |
| --- | --- |
| ``mixin`` | ``VerlExtDriverMixin``: each step's entropy control and token lens, and their checkpoint file |
| ``token_lens`` | the token lens: its keys and the JSONL / wandb writer of the selected tokens |
| ``checkpoints`` | where verl's trainers save and load a step's checkpoint (resume modes) |
| ``run_log`` | verl's file log continued (not truncated) when a run resumes from a checkpoint |
| ``watchdog`` | a dead actor or vLLM engine of the run, or a stall, stops it, naming it, the last step and checkpoint |
| ``watchdog_config`` | the ``verl_ext.watchdog`` keys, validated at config time |
| ``stall`` | the stall bound derived from the run's own steps, and the report of a stalled run |
| ``progress`` | the trainer's logged steps published to the watchdog (Ray's GCS), and the job's running actor methods |
| ``engine_health`` | the rollout servers' ``/health``, asked straight (no proxy), every server at once |

May import: ``verl_ext.config``, ``contract``, ``gcs_store``, ``losses`` and ``control``; never the trainer, the
checks or anything above them.
"""
