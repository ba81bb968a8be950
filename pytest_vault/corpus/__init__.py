"""The case format: `model` (a case), `load` (reading corpus files), and the checker
`python -m pytest_vault.corpus`."""
