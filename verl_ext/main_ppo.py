"""``python -m verl_ext.main_ppo``: the training entry point (it lives in :mod:`verl_ext.trainer.main`)."""

from __future__ import annotations

from verl_ext.trainer.main import main

if __name__ == "__main__":
    main()
