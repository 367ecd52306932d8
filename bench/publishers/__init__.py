"""Other publishers' results as cards: InferenceX, vLLM's performance dashboard, MLPerf.

model       a published point as a card: hardware, engine, workload, figures and their
            definitions, constraints, what is missing and what cannot be reproduced
source      reading a publisher's file: bounded in size and time, UTF-8, one-line errors
inferencex  InferenceX's database dump (JSON rows) to cards and back
vllm_dashboard  vLLM's per-commit serving results (JSON) to cards and back
mlperf      an MLPerf Inference submission's server-scenario log summary to a card and back
metrics     each publisher's figures computed its own way from per-request records
launch      a launch profile seeded from a card that gives the server's command
workload    a card's traffic as a bench workload (`bench card workload`), and what differs
run_trials  a workload run's point as the trials a reproduction judges
reproduce   our trials judged against a card's figures and constraints, the publisher's way
command     `bench card import|launch|export`, the speed-test card's and the publishers'
"""
