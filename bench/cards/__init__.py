"""The shipped published card (page text), found by bench.verdict and provisioning.

No modules: the card files themselves.
"""
