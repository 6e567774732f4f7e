"""The recipes, shipped inside the package as ``verl_ext.recipe`` so that an installed verl_ext can run them
(``python -m verl_ext.demo`` runs ``cpu_tiny.sh``): each ``<name>.yaml`` is a Hydra composition holding every setting
of one recipe, and ``<name>.sh`` launches it (``launch.sh``: SCALE, MODEL, DRY_RUN, PRINT_CMD). Nothing here is
Python."""
