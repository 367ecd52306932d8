"""Helpers the test suites share: scripted and simulated servers, synthetic runs, the
twin as a process, stopping processes, `require` for the tools a test needs."""
