"""Width transfer: a parametrization of the whole optimizer, and its check."""
