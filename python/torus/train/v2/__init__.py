"""Ray Train V2's module path (`ray.train.v2`): the same trainers and configs as torus.train."""
