"""`bench provenance`: where a bundle's figures come from, and how to make them again.

command  prints bench's commit, the image, the launch and the weights of a verified bundle
         (`--recipe`: its recipe.json); the facts themselves are read by
         `bench.bundle.provenance` and `bench.bundle.recipe`
"""
