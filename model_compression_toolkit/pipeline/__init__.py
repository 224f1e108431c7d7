"""The PTQ session and the tuning loop: they emit events and never know who listens."""
