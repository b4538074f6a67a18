"""The modules that run the commands (one per command, imported by name by tokenspace.cli.main once the
arguments parsed; each imports its libraries at the top)."""
