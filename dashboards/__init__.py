"""dashboards: read a sweep's runs from MLflow and compare them (tables, plots, HTML report). Never writes training state."""
