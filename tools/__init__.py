"""Developer harnesses, not shipped, each behind a make target:

    perf             the performance benchmark (`make perf`, `make perf-sweep`)
    reproduce_twin   the published sweep against the twin (`make reproduce-twin`)
    compare_twin     `bench compare` on twin runs (`make compare-twin`)
    verdict_power    `bench compare`'s error rates in virtual time (`make verdict-power`)
    decide_power     the sequential compare aimed at a decision beside fixed designs
                     (`make decide-power`)
    capacity_power   `bench capacity`'s accuracy, its compare's false alarms and power
                     (`make capacity-power`)
    fleet_power      `bench fleet`'s error rates on the twin (`make fleet-power`)
    peers            ours, `vllm bench serve` and AIPerf on one twin against its truth log
                     (`make peers`)
    history_power    `bench history changes`' false alarms and delay (`make history-power`)
    fingerprint_cost  the answer fingerprint's share of a card sweep (`make fingerprint-cost`)
    noise_corpus     identical runs against real engines, a server start each (`make noise-corpus`)
    corpus_power     `bench compare`'s error rates by resampling that corpus (`make verdict-power`)
    fleet_calibrate  the multipliers of `bench fleet`'s rule (`make fleet-calibrate`)
    twin_calibrate   the `published` twin profile fitted to the card (`make twin-fit`)
    gpu_check        the first thing run on a real GPU machine (`make gpu-check`)
    workload_samples  the presets' generated ShareGPT sample and mooncake trace
                     (`make workload-samples`)
    commands_doc     docs/commands.md from the Makefile and the parsers (`make commands-doc`)
    grafana_dashboard  the history's Grafana dashboard, docs/grafana/bench-history.json
                     (`make grafana-dashboard`)
    independent_reference  the methodology written a second time, sharing nothing with
                     bench.run, against the twin (`make twin-calibration`)

They live outside the `bench` package, so neither the wheel nor the images carry them.
"""
