"""Tools for policy authors, above the guard: `lint` (mistakes in a passport, before
anything runs), `diff` (what two passports permit differently, each change settled by a
witness the guard itself decides differently under them: `witness`) and the verdict line
every reviewer output starts with (`verdict`); `vault-guard` is their command line
(`python -m pytest_vault.policy`)."""
