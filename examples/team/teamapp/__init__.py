"""Payouts for the team's customers: the rules (payments) and the assistant (agent)."""
