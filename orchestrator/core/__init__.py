"""What every room of the orchestrator may use: bounds on values a user writes."""
