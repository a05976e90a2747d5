"""What every room of the orchestrator may use: user errors, bounds, the metric registry, printable text.

- `errors`: `UserError`, the one exception type for a user's mistake (one line, exit status 2);
- `bounds`: bounds on values a user writes, shared by every config section;
- `metrics`: the metric registry, every metric named once;
- `printable`: untrusted text as escapes where it reaches a terminal, a markdown table or a plot;
- `values`: `same_value`, a value as a user writes it against the value a run recorded.

Leaves: no module here imports another room of gatesweep.
"""
