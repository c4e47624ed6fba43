"""Task schedulers: which task of a network gets the next batch (``scheduler``), and the task profiles they read."""
