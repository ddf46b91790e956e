"""Network parts the agents share: MLPs, encoders, distributions, normalisation and the
choice of encoder for an observation space."""
