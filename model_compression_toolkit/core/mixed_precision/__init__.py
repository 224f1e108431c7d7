"""Mixed precision: one weight bit-width per layer under a memory budget."""
