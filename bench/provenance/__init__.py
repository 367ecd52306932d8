"""Where a run's figures come from, and how to make them again.

sources  what results.json and environment.json say: bench's commit, image, weights
recipe   recipe.json: the pinned inputs of a run (image, launch, model, bench)
command  `bench provenance`
"""
