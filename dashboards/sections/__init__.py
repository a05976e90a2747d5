"""The report's sections as neutral parts (`dashboards.sections.parts`) and its plots
(`dashboards.sections.plots`)."""
