"""What ray.serve keeps in ray.serve._private: checks, the build of an application into services, the head's
services API, the call protocol between handles and replicas, and the replica's server."""
