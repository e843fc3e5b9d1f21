"""`ray.train.v2.api`: configs, context and results of Ray Train V2 (torus.train's)."""
