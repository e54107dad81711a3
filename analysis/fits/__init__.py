"""The fits: Kaplan, Chinchilla Approaches 1-3, power laws, envelopes, bootstrap, the table of fits."""
