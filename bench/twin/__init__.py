"""The twin: a simulated vLLM server (engine model, HTTP surface, profiles, calibration)."""
