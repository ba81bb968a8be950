"""Real models: `providers` (OpenAI and Anthropic through their SDKs), `cache` (one file
per response), `ratelimit` (request and token budgets, the spend cap) and `specs`
(`--vault-model` specs, read without importing any model code).
"""
