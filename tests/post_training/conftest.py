"""Post-training tests: the trainer runs here (.venv); a rollout engine may run in .venv-serve."""
