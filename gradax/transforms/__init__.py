"""Building blocks: small transformations that optimizers are made of."""
