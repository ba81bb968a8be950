"""One evaluation: `agent` (the loop) drives a model against the `bank`, with the guard in
front in the guarded architecture; `levels` (passports, prompts, decode settings),
`controls` (the deterministic control models) and `events` (an evaluation -> its row).
"""
