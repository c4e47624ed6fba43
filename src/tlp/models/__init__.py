"""The shipped cost models (package data): ``tlp-cpu.pt`` and its card ``MODEL_CARD.md``."""
