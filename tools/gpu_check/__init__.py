"""The GPU check for a GPU machine nobody has run on yet (`make gpu-check`, `__main__`)."""
