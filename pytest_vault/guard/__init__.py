"""The guard: a deterministic OAP policy engine for `finance.payment.charge.v1`, usable
without pytest. `engine` judges calls, `passport` reads passports, `text` holds the rules
for text that leaves pytest-vault; `python -m pytest_vault.guard` is the command line.
"""
