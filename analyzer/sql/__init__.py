"""Named SQL over the store: the schema, the interval algebra and every analysis."""
