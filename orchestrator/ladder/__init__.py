"""The scaling ladder, in one room: config, plan, runs, laws, analysis, promotion and the report's section.

The scaling ladder, in one room: its config and the recipe that plans each rung (`config`,
`plan`), the runs as records and the one baseline rule (`runs`), the laws and their fit (`laws`),
the analysis of a ladder's runs (`estimate`: anchored multipliers, the joint multiplier and its
trend, the rollout check, verdicts; built on `cells`, `multipliers`, `checks`), promotion across
rungs (`promotion`), the report's section as neutral tables (`section`), and synthetic ladders
with a known answer for calibration (`synthetic`).

It sits below the sweep spec (which reads a sweep file's `ladder:` section), the launcher
(promotion) and the dashboards (the report's section), and reads no store: every answer is a
function of the records it is given."""
