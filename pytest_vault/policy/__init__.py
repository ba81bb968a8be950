"""Tools for policy authors, above the guard: `lint` (mistakes in a passport, before
anything runs) and `diff` (what two passports permit differently); `vault-guard` is their
command line (`python -m pytest_vault.policy`)."""
