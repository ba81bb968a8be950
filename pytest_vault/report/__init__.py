"""From results rows to tables: `results` (the file), `tables` (the analysis), `summary`
(the session's), `formats` (text, CSV), `html` (the page; its `failures` and `charts`),
`stats`; the command line is `vault-report` (`python -m pytest_vault.report`). It reads
rows, never the providers.
"""
