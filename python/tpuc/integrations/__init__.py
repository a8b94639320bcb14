"""Integrations of tpuc with third-party projects, one package each (vllm, sglang, ...)."""
