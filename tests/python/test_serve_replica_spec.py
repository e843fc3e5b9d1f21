"""What a deployment's replica holds on torus (torus.serve._private.service_spec.replica_gang): ray_actor_options'
CPUs, GPUs, memory and custom resources; accelerator_type and label_selector as the gang's label selector; TPU chips
as whole-slice gangs split into processes of that many chips; placement_group_bundles as one process per bundle."""

import pytest

from torus.serve._private.deployment_config import ReplicaConfig
from torus.serve._private.service_spec import TpuShape, replica_gang

V5E_2X4 = TpuShape("TPU-V5LITEPOD", "2x4", 8, 1)
V6E_4X4 = TpuShape("TPU-V6E", "4x4", 4, 4)


def gang(tpu_shapes=(), **options):
    def model(request):
        return "ok"
    return replica_gang(ReplicaConfig.create(model, **options), tpu_shapes)


def test_cpu_gpu_memory_and_custom_resources_are_one_process():
    assert gang(ray_actor_options={"num_cpus": 2, "num_gpus": 1, "memory": 1 << 30, "resources": {"disk": 1}}) == {
        "num_workers": 1, "placement_strategy": "PACK", "use_gpu": True,
        "resources_per_worker": {"CPU": 2, "GPU": 1, "memory": 1 << 30, "disk": 1}}
    assert gang() == {"num_workers": 1, "placement_strategy": "PACK", "resources_per_worker": {"CPU": 1}}


def test_label_selector_and_accelerator_type_become_the_gangs_selector():
    assert gang(ray_actor_options={"accelerator_type": "L4", "num_gpus": 1,
                                   "label_selector": {"team": "ml", "zone": "in(a,b)"}})["label_selector"] == {
        "team": "ml", "zone": "in(a,b)", "ray.io/accelerator-type": "L4"}


def test_tpu_chips_take_the_smallest_slice_whose_hosts_split_into_such_processes():
    assert gang((V5E_2X4, V6E_4X4), ray_actor_options={"resources": {"TPU": 4}}) == {
        "accelerator_type": "TPU-V5LITEPOD", "topology": "2x4", "resources_per_worker": {"CPU": 1, "TPU": 4}}
    # A selector naming the slice's topology picks it, and is not passed on as a label to match.
    assert gang((V5E_2X4, V6E_4X4), ray_actor_options={
        "resources": {"TPU": 4}, "label_selector": {"ray.io/tpu-topology": "4x4", "team": "ml"}}) == {
        "accelerator_type": "TPU-V6E", "topology": "4x4", "resources_per_worker": {"CPU": 1, "TPU": 4},
        "label_selector": {"team": "ml"}}


def test_tpu_chips_no_slice_can_hold_are_refused_naming_the_slices():
    # (A count that is no chip configuration at all, 3, is refused before with Ray's message.)
    with pytest.raises(ValueError) as e:
        gang((V6E_4X4,), ray_actor_options={"resources": {"TPU": 8}})
    assert str(e.value) == (
        "ray_actor_options: a replica of 8 chips takes a whole TPU slice on torus, and the cluster has no slice "
        "whose hosts hold a multiple of 8 chips with room for 1 such processes (slices: TPU-V6E 4x4 (4 chips per "
        "host)); give accelerator_type and label_selector {'ray.io/tpu-topology': ...} of a slice, or use "
        "_with_replica_gang")


def test_placement_group_bundles_are_one_process_each_sized_as_the_largest():
    assert gang(ray_actor_options={"num_cpus": 1}, placement_group_bundles=[{"CPU": 1}, {"CPU": 2, "GPU": 1}],
                placement_group_strategy="STRICT_SPREAD") == {
        "num_workers": 2, "placement_strategy": "STRICT_SPREAD", "use_gpu": True,
        "resources_per_worker": {"CPU": 2, "GPU": 1}}
