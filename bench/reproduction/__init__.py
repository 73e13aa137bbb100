"""The claim registry, the claims of both seed papers and the report of ``bench/reproduce.py``."""
