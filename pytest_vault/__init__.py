"""pytest-vault: payment-agent attacks as pytest tests, judged by an OAP guard."""

__version__ = "0.1.0"
