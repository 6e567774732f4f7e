"""The launch scripts (bash), shipped inside the package as ``verl_ext.recipe`` so that an installed verl_ext can run
them (``python -m verl_ext.demo`` runs ``cpu_tiny.sh``). Run them with ``bash``; nothing here is Python."""
