"""The recipes, shipped inside the package as ``verl_ext.recipe`` so that an installed verl_ext can run them
(``python -m verl_ext.demo`` runs ``cpu_tiny.sh``): each ``<name>.yaml`` is a Hydra composition holding every setting
of one recipe, and ``<name>.sh`` launches it (``launch.sh``: SCALE, MODEL, DRY_RUN, PRINT_CMD). ``launch_env`` is the
launcher's table of cluster variables and the Hydra override each becomes (``python -m verl_ext.recipe.launch_env
table``), which ``launch.sh`` and ``scripts/cluster/submit.sh`` run.

May import: nothing of verl_ext, and not verl (the launcher runs it before anything is imported)."""
