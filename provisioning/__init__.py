"""The orchestration side: runs on the user's workstation and drives a GPU host over SSH.

May use `bench`'s records and bundle code; `bench` never imports this package.
"""
