"""The fits: Kaplan, Chinchilla Approaches 1-3, power laws, envelopes, the table of fits."""
