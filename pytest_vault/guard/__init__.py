"""The guard: a deterministic OAP policy engine for `finance.payment.charge.v1`, usable
without pytest. `engine` judges calls, `passport` reads passports, `text` holds the rules
for text that leaves pytest-vault; `python -m pytest_vault.guard` is the command line.

`Guard` here is the production check (`production.Guard`: the engine with a durable
ledger, an audit log and the `protect` wrapper); the suite's bank uses `engine.Guard`.
"""

from pytest_vault.guard.production import Guard, PaymentDenied

__all__ = ["Guard", "PaymentDenied"]
