"""Learning-rate and hyperparameter schedules."""
